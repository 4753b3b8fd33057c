/* The VM launcher: the first program a pooled VM runs, built by the node at start (static, no shell).

   bwrap starts it as `/tool/launch CTL_FD ERR_FD` ahead of any call, with the VM's namespaces, mounts and
   cgroup already set up. It writes "R" on ERR_FD (the node then knows the VM is ready), reads the call's
   command from CTL_FD (the arguments, each ended by a NUL byte, then end of file), closes every descriptor
   but stdin, stdout, stderr and ERR_FD, and execve()s the command with its own environment (bwrap's
   --clearenv/--setenv one). ERR_FD is close-on-exec: the node reads end of file when the command started,
   and the errno (4 bytes) when execve failed. An empty command (the node discards the VM) exits 0.

   On the host the node also runs it as `launch --as UID GID NSFD CGFDS PROGRAM ARGS...` to start bwrap as
   the VM's user: it first joins the VM's cgroup by writing 0 to each descriptor of the comma-separated
   CGFDS (the group's cgroup.procs files, "-" for none), so that the cgroup namespace bwrap makes is rooted
   at the VM's own group (the VM's /proc/self/cgroup names no host group); it enters the mount namespace
   NSFD (when not -1), drops every group and sets the gid and uid
   (real, effective, saved) before execv() with PROGRAM's base name as argv[0] (no host path in the sandbox's
   /proc/1/cmdline), so the node can spawn with vfork instead of forking its whole Python process to change
   the user.

   And once per node as `launch --hold NODE_DIR`: it makes a small mount namespace (a tmpfs root with /usr,
   /bin, /sbin, /lib*, /etc, /proc, /dev, an empty /tmp (bwrap's staging point) and NODE_DIR, receiving the host's later mounts under NODE_DIR),
   writes "R" on stdout and sleeps, so that the node's VMs are spawned in that namespace: bwrap copies the
   whole mount table of the namespace it starts in, and the host's may be large. It dies with the node. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
    int ns_fd = atoi(argv[4]);
    if (uid == 0 || gid == 0) _exit(126);
    if (strcmp(argv[5], "-") != 0) {
        for (char *p = argv[5]; *p;) {
            char *end;
            long fd = strtol(p, &end, 10);
            if (end == p || fd < 3) _exit(124);
            if (write((int)fd, "0", 1) != 1) _exit(124);
            close((int)fd);
            p = *end == ',' ? end + 1 : end;
            if (*end != ',' && *end != '\0') _exit(124);
        }
    }
    if (ns_fd >= 0) {
        if (setns(ns_fd, CLONE_NEWNS) != 0 || chdir("/") != 0) _exit(125);
        close(ns_fd);
    }
    if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(126);
    if (getuid() != uid || geteuid() != uid || getgid() != gid || getegid() != gid) _exit(126);
    char *prog = argv[6], *base = strrchr(prog, '/');
    if (base != NULL) argv[6] = base + 1;
    execv(prog, argv + 6);
    _exit(127);
}

static void die(const char *what) {
    perror(what);
    _exit(1);
}

/* mkdir -p under root (a path starting with /) */
static void make_path(const char *root, const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s%s", root, path) >= (int)sizeof buf) die("path too long");
    for (char *p = buf + strlen(root) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die(buf);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die(buf);
}

static void bind_into(const char *root, const char *path) {
    char dest[4096];
    struct stat st;
    if (lstat(path, &st) != 0) return;
    snprintf(dest, sizeof dest, "%s%s", root, path);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0) die(path);
        target[n] = '\0';
        if (symlink(target, dest) != 0) die(dest);
        return;
    }
    make_path(root, path);
    if (mount(path, dest, NULL, MS_BIND | MS_REC, NULL) != 0) die(dest);
}

static int hold(const char *node_dir) {
    static const char *const keep[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                                       "/etc", "/proc", "/dev", NULL};
    char root[4096], old[4200];
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
    if (getppid() == 1) _exit(1);
    if (unshare(CLONE_NEWNS) != 0) die("unshare");
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) die("make-rslave");
    if (snprintf(root, sizeof root, "%s/nsroot", node_dir) >= (int)sizeof root) die("path too long");
    if (mount("b3os-ns", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k") != 0) die(root);
    bind_into(root, node_dir);  /* first: its copy then holds no copy of the others */
    for (int i = 0; keep[i]; i++) bind_into(root, keep[i]);
    make_path(root, "/tmp");  /* bwrap stages the sandbox's root on a tmpfs it mounts at /tmp */
    snprintf(old, sizeof old, "%s/.old", root);
    if (mkdir(old, 0700) != 0) die(old);
    if (syscall(SYS_pivot_root, root, old) != 0) die("pivot_root");
    if (chdir("/") != 0) die("chdir");
    if (umount2("/.old", MNT_DETACH) != 0) die("umount old root");
    rmdir("/.old");
    if (write(1, "R", 1) != 1) _exit(1);
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc >= 7 && strcmp(argv[1], "--as") == 0) return run_as(argv);
    if (argc == 3 && strcmp(argv[1], "--hold") == 0) return hold(argv[2]);
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
