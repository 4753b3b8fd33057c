#!/usr/bin/python3 -IS
"""The microVM guest's init (pid 1 of the guest; `b3os node build-guest` puts it at /init of the initramfs).

Standard library only, Python 3.11 (the base template's). It mounts what a tool needs, loads the virtio
modules the initramfs carries, opens the virtio-serial port named `b3os` and says it is ready; then it
serves the node, one message at a time, for exactly one call:

    node -> guest                                 guest -> node
    {"op": "files", "entries"} + bytes            {"ok"} | {"error"}     input files, under /in (then ro)
    {"op": "tool", "entries"} + bytes             {"ok"} | {"error"}     the tool's tree, kept in memory
    {"op": "unpack"}                              {"ok"} | {"error"}     written under /tool (then ro)
    {"op": "run", "cmd", "max_stdout"} + stdin    {"started", "exit_code" | "signal", ...} + stdout
    {"op": "collect", "names", "max_total"}       {"sizes"} + the files | {"error"}
    {"op": "off"}                                 (powers off)

A message is 8 bytes (the JSON header's length and the data's, big-endian), the JSON header, the data.
The command runs without a shell in /work as uid and gid 1000 (no other group), environment exactly
`PATH`, `HOME=/work`, `LANG=C.UTF-8`, stdin the request, stderr discarded; init itself is root, out of the
OOM killer's reach, and its port is root's only. Anything init cannot do ends it, and with it the VM
(`panic=-1` and QEMU's `-no-reboot`): the node sees the port close, never a half answer.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import resource
import selectors
import signal
import socket
import stat
import struct
import subprocess
import threading
import time
from typing import Any

USER = 1000
PORT_NAME = "b3os"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8"}
LIMITS = {
    "work_mb": 64,
    "tmp_mb": 16,
    "shm_mb": 16,
    "out_kb": 1024,
    "in_kb": 2048,
    "tool_mb": 256,
    "pids": 64,
}
HEAD = struct.Struct(">II")
MAX_HEADER = 1 << 20
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
POWER_OFF = 0x4321FEDC
FINIT_MODULE = 313  # x86_64
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

_libc = ctypes.CDLL(None, use_errno=True)


def send(fd: int, header: dict[str, Any], data: bytes = b"") -> None:
    """Write one message: the 8-byte lengths, the JSON header, the data."""
    head = json.dumps(header).encode()
    view = memoryview(HEAD.pack(len(head), len(data)) + head + data)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd: int, n: int) -> bytes:
    """Exactly `n` bytes from `fd`. Raises EOFError when it closes first."""
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the channel closed")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def receive(fd: int) -> tuple[dict[str, Any], bytes]:
    """Read one message: its JSON header and its data. Raises EOFError when the channel closes."""
    head_len, data_len = HEAD.unpack(read_exact(fd, HEAD.size))
    if head_len > MAX_HEADER:
        raise EOFError("a header longer than 1 MiB")
    header = json.loads(read_exact(fd, head_len))
    return header, read_exact(fd, data_len)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str, flags: int = 0, options: str = "") -> None:
    os.makedirs(target, exist_ok=True)
    res = _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, options.encode() or None)
    _check(res, f"mount {target}")


def remount_ro(target: str) -> None:
    flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    _check(_libc.mount(None, target.encode(), None, flags, None), f"remount {target}")


def load_modules(listing: str = "/etc/b3os-modules") -> None:
    """Load the kernel modules the build listed, in its order (dependencies first)."""
    with open(listing) as fh:
        for path in fh.read().split():
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                res = _libc.syscall(FINIT_MODULE, fd, b"", 0)
                if res != 0 and ctypes.get_errno() != 17:  # EEXIST: built in
                    _check(res, f"load {path}")
            finally:
                os.close(fd)


def boot_limits() -> dict[str, int]:
    """The sizes the node put on the kernel command line (`b3os.limits=key:value,...`)."""
    limits = dict(LIMITS)
    with open("/proc/cmdline") as fh:
        for word in fh.read().split():
            if word.startswith("b3os.limits="):
                for pair in word.removeprefix("b3os.limits=").split(","):
                    key, _, value = pair.partition(":")
                    if key in limits and value.isdigit():
                        limits[key] = int(value)
    return limits


def set_up() -> dict[str, int]:
    """Mount what a tool needs, sized by the kernel command line; load the modules; return the sizes."""
    # the tool sees its own processes only (init and the kernel's threads are root's)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
    limits = boot_limits()
    _check(_libc.mount(b"/etc/b3os-blank", b"/proc/cmdline", None, MS_BIND, None), "hide /proc/cmdline")
    socket.sethostname("vm")
    mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
    mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for target, size, mode, owner in (
        ("/tmp", limits["tmp_mb"] << 20, "1777", 0),
        ("/dev/shm", limits["shm_mb"] << 20, "1777", 0),
        ("/work", limits["work_mb"] << 20, "0755", USER),
        ("/out", limits["out_kb"] << 10, "0755", USER),
        ("/in", limits["in_kb"] << 10, "0755", 0),
        ("/tool", limits["tool_mb"] << 20, "0755", 0),
    ):
        opts = f"size={size},mode={mode},uid={owner},gid={owner}"
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    remount_ro("/")  # the initramfs: nothing of the base is the tool's to change
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("-1000")
    with open("/proc/sys/vm/overcommit_memory", "w") as fh:
        fh.write("1")  # as on a sandbox's host: a tool past the VM's memory is OOM-killed, not refused
    loopback_up()
    load_modules()
    return limits


def loopback_up() -> None:
    """Bring up `lo`, the guest's only network interface (as the sandbox's own loopback is up)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def open_port(timeout_s: float = 30.0) -> int:
    """The virtio-serial port named `b3os` (devtmpfs makes its node; no udev names it)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            ports = sorted(os.listdir("/sys/class/virtio-ports"))
        except FileNotFoundError:
            ports = []
        for port in ports:
            try:  # the name comes a moment after the port
                with open(f"/sys/class/virtio-ports/{port}/name") as fh:
                    if fh.read().strip() == PORT_NAME:
                        return os.open(f"/dev/{port}", os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
        time.sleep(0.005)
    with open("/proc/modules") as fh:
        loaded = " ".join(line.split()[0] for line in fh)
    devices = " ".join(sorted(os.listdir("/sys/bus/platform/devices")))
    raise OSError(f"no virtio-serial port named b3os (modules: {loaded}; platform devices: {devices})")


def _safe(rel: str) -> str:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"the path {rel!r} is not a relative path inside the tree")
    return rel


def write_tree(root: str, entries: list[dict[str, Any]], data: bytes, *, gid: int, file_mode: int) -> None:
    """Write entries `{path, kind: "d"|"f"|"l", mode?, size, target}` under `root`, contents from `data`,
    root's and in group `gid`; without a mode a directory is 0750 and a file `file_mode`."""
    offset = 0
    for entry in entries:
        path = os.path.join(root, _safe(entry["path"]))
        kind = entry["kind"]
        if kind == "d":
            os.mkdir(path, 0o700)
            os.chown(path, 0, gid)
            os.chmod(path, entry["mode"] & 0o755 if "mode" in entry else 0o750)
        elif kind == "l":
            os.symlink(entry["target"], path)
        elif kind == "f":
            size = entry["size"]
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)[offset : offset + size]
                while view:
                    view = view[os.write(fd, view) :]
                os.fchown(fd, 0, gid)
                os.fchmod(fd, entry["mode"] & 0o755 if "mode" in entry else file_mode)
            finally:
                os.close(fd)
            offset += size
        else:
            raise ValueError(f"an entry of kind {kind!r}")


def _oom_kills() -> int:
    with open("/proc/vmstat") as fh:
        for line in fh:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


def _as_user() -> None:
    """In the command's process before it execs: the OOM killer's first choice (init, whose -1000 it
    inherited, is never one), at most `pids` processes, then the tool's user and group only."""
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")
    resource.setrlimit(resource.RLIMIT_NPROC, (LIMITS["pids"], LIMITS["pids"]))
    os.setgroups([])
    os.setgid(USER)
    os.setuid(USER)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _kill_user_processes() -> None:
    """Kill every process of the tool's user (a daemon it left) from a child that is that user."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the guest
        try:
            os.setgroups([])
            os.setgid(USER)
            os.setuid(USER)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def run(cmd: list[str], stdin: bytes, max_stdout: int) -> tuple[dict[str, Any], bytes]:
    """Run the command and say how it ended, with its stdout (at most `max_stdout` bytes)."""
    oom_before = _oom_kills()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/work",
            env=ENV, close_fds=True, start_new_session=True, preexec_fn=_as_user,
        )  # fmt: skip
    except OSError as exc:
        return {"started": False, "exec_error": exc.strerror or str(exc)}, b""
    except subprocess.SubprocessError as exc:  # the preparation before exec failed
        return {"started": False, "exec_error": str(exc)}, b""
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        try:
            proc.stdin.write(stdin)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    out = bytearray()
    too_large = False
    pidfd = os.pidfd_open(proc.pid)
    stdout_fd = proc.stdout.fileno()
    os.set_blocking(stdout_fd, False)
    sel = selectors.DefaultSelector()
    sel.register(stdout_fd, selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    exited = False
    while True:
        ready = {key.fd for key, _ in sel.select()}
        if stdout_fd in ready or exited:
            try:
                chunk = os.read(stdout_fd, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk:
                out += chunk
                if len(out) > max_stdout:
                    too_large = True
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                continue
            if chunk == b"" or exited:
                if chunk == b"":
                    sel.unregister(stdout_fd)
                break
        if pidfd in ready:
            exited = True  # read what is left of stdout without blocking (a daemon may hold it open)
    _, status, usage = os.wait4(proc.pid, 0)  # the command's own usage (and its reaped children's)
    code = proc.returncode = os.waitstatus_to_exitcode(status)
    _kill_user_processes()
    result: dict[str, Any] = {
        "started": True,
        "stdout_too_large": too_large,
        "run_ms": round((time.monotonic() - started) * 1000, 2),
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000,
        "maxrss_kb": usage.ru_maxrss,
        "oom_killed": _oom_kills() > oom_before,
    }
    if code < 0:
        result["signal"] = -code
    else:
        result["exit_code"] = code
    return result, bytes(out[:max_stdout])


FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def collect(names: list[str], max_total: int) -> tuple[dict[str, Any], bytes]:
    """Read the named files from /out: regular files directly under /out, within `max_total` in all.

    The refusals are the sandbox driver's, word for word (`node/vm/collect.py`, which this mirrors).
    """
    parts: list[bytes] = []
    total = 0
    for name in names:
        if not FILE_NAME.match(name):
            return {"error": f"output file /out/{name} is not a file name directly under /out"}, b""
        try:
            fd = os.open(f"/out/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:
            return {"error": f"output file /out/{name} does not exist"}, b""
        except OSError:
            return {"error": f"output file /out/{name} is not a regular file (a symlink?)"}, b""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                return {"error": f"output file /out/{name} is {kind}"}, b""
            total += info.st_size
            if total > max_total:
                return {"error": f"output files pass {max_total} bytes in all (at /out/{name})"}, b""
            with os.fdopen(os.dup(fd), "rb") as fh:
                parts.append(fh.read(max_total + 1))
        finally:
            os.close(fd)
    return {"sizes": [len(p) for p in parts]}, b"".join(parts)


WARM_UP = ["/bin/sh", "-c", "printf '{}' | jq -c . >/dev/null; python3 -c 'import json, os, sys'"]


def warm_up() -> None:
    """Run the base's usual runtimes once before the call (as the tool's user, then killed): under TCG the
    first run of a program translates its code (and libc's), which the call's run then finds translated."""
    with contextlib.suppress(OSError):
        proc = subprocess.Popen(
            WARM_UP, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd="/tmp", env=ENV, user=USER, group=USER, extra_groups=[], start_new_session=True,
        )  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    _kill_user_processes()


def serve(port: int) -> None:
    tool: tuple[list[dict[str, Any]], bytes] | None = None
    with open("/proc/uptime") as fh:
        uptime_ms = float(fh.read().split()[0]) * 1000
    send(port, {"ready": True, "uptime_ms": uptime_ms})
    while True:
        header, data = receive(port)
        op = header.get("op")
        try:
            if op == "files":
                write_tree("/in", header["entries"], data, gid=USER, file_mode=0o640)
                remount_ro("/in")
                send(port, {"ok": True})
            elif op == "tool":
                tool = (header["entries"], data)
                send(port, {"ok": True})
            elif op == "unpack":
                if tool is not None:
                    write_tree("/tool", tool[0], tool[1], gid=0, file_mode=0o755)
                    tool = None
                remount_ro("/tool")
                send(port, {"ok": True})
            elif op == "run":
                answer, out = run(header["cmd"], data, header["max_stdout"])
                send(port, answer, out)
            elif op == "collect":
                answer, out = collect(header["names"], header["max_total"])
                send(port, answer, out)
            else:
                break
        except (OSError, ValueError, KeyError, TypeError) as exc:
            send(port, {"error": str(exc)})


def main() -> None:
    LIMITS.update(set_up())
    if "b3os.warm" in open("/proc/cmdline").read().split():
        warm_up()
    port = open_port()
    try:
        serve(port)
    except EOFError:
        pass
    os.sync()
    _libc.reboot(POWER_OFF)


if __name__ == "__main__":
    main()
