/* The VM launcher: the first program a pooled VM runs, built by the node at start (static, no shell).

   bwrap starts it as `/tool/launch CTL_FD ERR_FD` ahead of any call, with the VM's namespaces, mounts and
   cgroup already set up. It writes "R" on ERR_FD (the node then knows the VM is ready), reads the call's
   command from CTL_FD (the arguments, each ended by a NUL byte, then end of file), closes every descriptor
   but stdin, stdout, stderr and ERR_FD, and execve()s the command with its own environment (bwrap's
   --clearenv/--setenv one). ERR_FD is close-on-exec: the node reads end of file when the command started,
   and the errno (4 bytes) when execve failed. An empty command (the node discards the VM) exits 0.

   On the host the node also runs it as `launch --as UID GID PROGRAM ARGS...` to start bwrap as the VM's
   user: it drops every group and sets the gid and uid (real, effective, saved) before execv(), so the node
   can spawn with vfork instead of forking its whole Python process to change the user. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CMD (1 << 20)
#define MAX_ARGS 256

extern char **environ;

static int err_fd = -1;
static char buf[MAX_CMD + 1];
static char *args[MAX_ARGS + 1];

static void fail(int err) {
    ssize_t ignored = write(err_fd, &err, sizeof err);
    (void)ignored;
    _exit(127);
}

static int run_as(char **argv) {
    uid_t uid = (uid_t)strtoul(argv[2], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[3], NULL, 10);
    if (uid == 0 || gid == 0) _exit(126);
    if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(126);
    if (getuid() != uid || geteuid() != uid || getgid() != gid || getegid() != gid) _exit(126);
    execv(argv[4], argv + 4);
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "--as") == 0) return run_as(argv);
    if (argc != 3) _exit(126);
    int ctl_fd = atoi(argv[1]);
    err_fd = atoi(argv[2]);
    if (ctl_fd < 3 || err_fd < 3 || ctl_fd == err_fd) _exit(126);
    if (fcntl(err_fd, F_SETFD, FD_CLOEXEC) != 0) _exit(126);
    if (write(err_fd, "R", 1) != 1) _exit(126);
    size_t len = 0;
    for (;;) {
        ssize_t n = read(ctl_fd, buf + len, MAX_CMD - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(errno);
        if (n == 0) break;
        len += (size_t)n;
        if (len == MAX_CMD) fail(E2BIG);
    }
    if (len == 0) _exit(0);
    if (buf[len - 1] != '\0') fail(EINVAL);
    size_t count = 0;
    for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
        if (count == MAX_ARGS) fail(E2BIG);
        args[count++] = buf + i;
    }
    args[count] = NULL;
    close(ctl_fd);
    if (err_fd > 3) close_range(3, err_fd - 1, 0);
    close_range(err_fd + 1, ~0U, 0);
    execve(args[0], args, environ);
    fail(errno);
    return 127;
}
