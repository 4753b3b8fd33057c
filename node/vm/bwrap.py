"""The default VM driver: bubblewrap namespaces plus a per-call cgroup.

A VM here is a bubblewrap sandbox with new user, pid, net, ipc, uts, mount (and cgroup) namespaces and no
further user namespaces inside. Its root is the base template, read-only; `/tool` is the tool's unpacked
tree, read-only; `/in` holds the input files, read-only; `/out` is a fresh host tmpfs (size-limited, read back
by the node after the command); `/work` and `/tmp` are fresh size-limited tmpfs. The command runs without a
shell, in `/work`, as uid 1000 inside (the host uid `vm_uid`, never root), with only `PATH`, `HOME=/work` and
`LANG=C.UTF-8` in its environment. The net namespace is empty (a loopback of its own, no route to the host).

Each VM gets its own cgroup (memory with swap, CFS CPU quota, pids) under the node's own cgroup. bwrap is
started with `--block-fd`: its sandbox init (pid 1 of the VM) waits until the node has moved it into the
VM's cgroup, so every process of the command is in the group from its first instruction.

How the command ended comes from bwrap's `--json-status-fd`: an `exit-code` record means the command was
executed. bwrap reports a command killed by signal N as exit status 128+N (like a shell), so exit statuses
129..192 are read as signals; a tool that itself exits with such a status is reported as killed by a signal.

Prepared VMs (directory, tmpfs mounts, cgroup with limits) are kept in a small pool so that `start` costs a
queue pop; a VM is still used for one call and deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import select
import shutil
import stat
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from node.vm import mounts
from node.vm.base import InputFile, RunResult, Vm, VmDriver, VmError
from node.vm.cgroups import CallCgroup, CgroupError, CgroupLimits, NodeCgroups
from node.vm.collect import read_out_files
from node.vm.usage import UsageMeter

log = logging.getLogger("b3os.node.vm")

SANDBOX_UID = 1000
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class VmLimits:
    """The size of one VM."""

    memory_mb: int = 512
    vcpu: int = 1
    pids_max: int = 64
    work_mb: int = 64
    tmp_mb: int = 16
    out_kb: int = 1024
    in_kb: int = 2048


def _make_dir(path: Path, mode: int) -> None:
    path.mkdir(mode=mode, exist_ok=True)
    os.chmod(path, mode)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BwrapVm(Vm):
    """One prepared sandbox: a directory with in/, out/ (tmpfs) and tool/, and a cgroup."""

    def __init__(self, driver: BwrapDriver, vm_id: str, path: Path, cgroup: CallCgroup) -> None:
        self.id = vm_id
        self.path = path
        self.cgroup = cgroup
        self._driver = driver
        self._tool_src: Path | None = None
        self._deleted = False

    def copy(self, tool_dir: Path, files: Sequence[InputFile]) -> None:
        try:
            for f in files:
                field_dir = self.path / "in" / f.field
                _make_dir(field_dir, 0o755)
                target = field_dir / f.name
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(f.data)
        except OSError as exc:
            raise VmError(
                "copy", f"the input files could not be put in the VM's /in: {exc.strerror}"
            ) from exc
        self._tool_src = tool_dir

    def unpack(self) -> None:
        src = self._tool_src
        if src is None or not src.is_dir():
            raise VmError("unpack", "the tool's unpacked files are missing from the node's install cache")
        try:
            mounts.bind(src, self.path / "tool", read_only=True)
        except mounts.MountError as exc:
            raise VmError("unpack", f"the tool's files could not be mounted at /tool: {exc}") from exc

    def run(self, cmd: Sequence[str], stdin: bytes, *, timeout_s: float, max_stdout: int) -> RunResult:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [*self._driver.bwrap_args(self.path, status_w, block_r), "--", *cmd],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(status_w, block_r),
                user=self._driver.vm_uid,
                group=self._driver.vm_gid,
                extra_groups=[],
                start_new_session=True,
                cwd="/",
                env={},
            )
        except OSError as exc:
            for fd in (status_r, status_w, block_r, block_w):
                os.close(fd)
            return RunResult(started=False, exec_error=f"the sandbox could not be started: {exc.strerror}")
        os.close(status_w)
        os.close(block_r)
        with proc, open(status_r, "rb", buffering=0) as status:
            return self._supervise(proc, status, block_w, stdin, deadline, max_stdout)

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        status: object,
        block_w: int,
        stdin: bytes,
        deadline: float,
        max_stdout: int,
    ) -> RunResult:
        assert proc.stdin is not None and proc.stdout is not None
        status_fd = status.fileno()  # type: ignore[attr-defined]
        first = _read_line(status_fd, deadline)
        child = _json_int(first, "child-pid")
        if child is None:
            os.close(block_w)
            proc.kill()
            proc.wait()
            return RunResult(started=False, exec_error="the sandbox could not be set up")
        try:
            self.cgroup.add(child)
        except CgroupError as exc:
            os.close(block_w)
            proc.kill()
            proc.wait()
            _reap(child)
            return RunResult(started=False, exec_error=f"the VM's cgroup refused its init process: {exc}")
        meter = UsageMeter(self.cgroup)
        os.write(block_w, b"1")
        os.close(block_w)

        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
        os.set_blocking(out_fd, False)
        os.set_blocking(in_fd, False)
        pidfd = os.pidfd_open(proc.pid)
        poller = select.poll()
        poller.register(out_fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        pending = memoryview(stdin)
        if pending:
            poller.register(in_fd, select.POLLOUT)
        else:
            proc.stdin.close()
        chunks: list[bytes] = []
        size = 0
        result = RunResult(started=True)
        exited = False
        try:
            while not exited:
                now = time.monotonic()
                if now >= deadline:
                    result.timed_out = True
                    break
                for fd, _ev in poller.poll(max(1, min(10, int((deadline - now) * 1000) + 1))):
                    if fd == pidfd:
                        exited = True
                    elif fd == in_fd:
                        try:
                            pending = pending[os.write(in_fd, pending) :]
                        except BlockingIOError:
                            pass
                        except OSError:  # the tool closed its stdin: it does not want the rest
                            pending = pending[len(pending) :]
                        if not pending:
                            poller.unregister(in_fd)
                            proc.stdin.close()
                    elif fd == out_fd:
                        data = _read_some(out_fd)
                        if data is None:
                            poller.unregister(out_fd)
                        else:
                            chunks.append(data)
                            size += len(data)
                meter.sample()
                if size > max_stdout:
                    result.stdout_too_large = True
                    break
            meter.finish()
            self.cgroup.kill()
            proc.wait()
            _reap(child)
            if not result.stdout_too_large:
                rest = _drain(out_fd, max_stdout + 1 - size)
                chunks.append(rest)
                size += len(rest)
                result.stdout_too_large = size > max_stdout
        finally:
            os.close(pidfd)
            if not proc.stdin.closed:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        result.stdout = b"".join(chunks)[: max_stdout + 1]
        result.usage = meter.usage()
        result.oom_killed = self.cgroup.oom_kills() > 0
        if result.timed_out or result.stdout_too_large:
            return result
        code = _json_int(_read_line(status_fd, time.monotonic() + 0.5), "exit-code")
        if code is None:
            if proc.returncode is not None and proc.returncode < 0:
                result.lost = True
                return result
            return RunResult(started=False, exec_error="the command could not be executed in the VM")
        if 128 < code <= 192:
            result.signal = code - 128
        else:
            result.exit_code = code
        return result

    def collect(self, names: Sequence[str], *, max_total: int) -> dict[str, bytes]:
        return read_out_files(self.path / "out", names, max_total=max_total)

    def delete(self) -> None:
        if self._deleted:
            return
        self._deleted = True
        self._driver.destroy(self)


def _reap(pid: int) -> None:
    """Reap the VM's init: when bwrap's monitor exits first it is orphaned to us, the child subreaper."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_some(fd: int) -> bytes | None:
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return b""
    return data or None


def _drain(fd: int, limit: int) -> bytes:
    """Read what is left in a pipe whose writers are all dead."""
    chunks: list[bytes] = []
    got = 0
    end = time.monotonic() + 0.5
    while got < limit and time.monotonic() < end:
        data = _read_some(fd)
        if data is None:
            break
        if not data:
            select.select([fd], [], [], 0.01)
            continue
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _read_line(fd: int, deadline: float) -> bytes:
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        data = os.read(fd, 4096)
        if not data:
            break
        buf += data
    return buf


def _json_int(line: bytes, key: str) -> int | None:
    import json

    try:
        value = json.loads(line.split(b"\n", 1)[0] or b"null")
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get(key), int):
        return int(value[key])
    return None


class BwrapDriver(VmDriver):
    """Hands out bubblewrap VMs from a small pool prepared ahead of calls."""

    name = "bwrap"

    def __init__(
        self,
        *,
        base_rootfs: Path,
        run_dir: Path,
        limits: VmLimits | None = None,
        pool_size: int = 2,
        vm_uid: int = 65534,
        vm_gid: int = 65534,
    ) -> None:
        """Set up the node's directory, mounts and cgroup, and start filling the pool.

        Raises:
            VmError: reason "no_slot" when bwrap, the base template or cgroups are not usable here.
        """
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise VmError(
                "no_slot", "bubblewrap is not installed (Debian package `bubblewrap`; `make setup`)"
            )
        if not (base_rootfs / "usr").is_dir():
            raise VmError("no_slot", f"no base template at {base_rootfs}: run `b3os node build-base`")
        if vm_uid == 0 or vm_gid == 0:
            raise VmError("no_slot", "the VM's host uid and gid must not be root")
        mounts.become_subreaper()
        self.bwrap = bwrap
        self.limits = limits or VmLimits()
        self.vm_uid, self.vm_gid = vm_uid, vm_gid
        self.pool_size = pool_size
        self.run_dir = run_dir
        self.node_dir = run_dir / f"node-{os.getpid()}"
        self._cg_limits = CgroupLimits(self.limits.memory_mb << 20, self.limits.vcpu, self.limits.pids_max)
        self._pool: deque[BwrapVm] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._preparing = False
        run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(run_dir, 0o711)
        closed = [str(p) for p in run_dir.parents if not p.stat().st_mode & stat.S_IXOTH]
        if closed:
            raise VmError("no_slot", f"the VM's user cannot reach {run_dir}: {closed[0]} is not searchable")
        cleanup_stale(run_dir)
        _make_dir(self.node_dir, 0o711)
        _make_dir(self.node_dir / "base", 0o755)
        try:
            mounts.bind(base_rootfs, self.node_dir / "base", read_only=True)
            self.cgroups = NodeCgroups.open(f"b3os-node-{os.getpid()}")
        except (mounts.MountError, CgroupError) as exc:
            self._remove_node_dir()
            raise VmError("no_slot", f"the bwrap driver cannot start: {exc}") from exc
        self._filler = threading.Thread(target=self._fill, name="b3os-vm-pool", daemon=True)
        self._filler.start()

    def bwrap_args(self, vm_dir: Path, status_fd: int, block_fd: int) -> list[str]:
        """The bwrap command line for one VM, up to (not including) `--` and the command."""
        lim = self.limits
        return [
            self.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "vm",
            "--ro-bind", str(self.node_dir / "base"), "/",
            "--ro-bind", str(vm_dir / "tool"), "/tool",
            "--ro-bind", str(vm_dir / "in"), "/in",
            "--bind", str(vm_dir / "out"), "/out",
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(lim.work_mb << 20), "--tmpfs", "/work",
            "--size", str(lim.tmp_mb << 20), "--tmpfs", "/tmp",
            "--chdir", "/work", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8",
            "--json-status-fd", str(status_fd), "--block-fd", str(block_fd),
        ]  # fmt: skip

    def claim(self, deadline: float) -> Vm:
        with self._cond:
            if self._closed:
                raise VmError("no_slot", "the node is shutting down")
            vm = self._pool.popleft() if self._pool else None
            self._cond.notify_all()
        if vm is None:
            if time.monotonic() >= deadline:
                raise VmError("no_slot", "the call's time ran out before a VM was free")
            try:
                vm = self._prepare()
            except (OSError, mounts.MountError, CgroupError) as exc:
                log.warning("no VM could be prepared: %s", exc)
                raise VmError("no_slot", "no VM could be prepared on this node") from exc
        return vm

    def _prepare(self) -> BwrapVm:
        vm_id = f"vm-{secrets.token_hex(6)}"
        path = self.node_dir / vm_id
        _make_dir(path, 0o711)
        try:
            for sub in ("in", "tool", "out"):
                _make_dir(path / sub, 0o755)
            lim = self.limits
            mounts.tmpfs(path / "in", size_bytes=lim.in_kb << 10, uid=0, gid=0, inodes=64, mode=0o755)
            mounts.tmpfs(
                path / "out",
                size_bytes=lim.out_kb << 10,
                uid=self.vm_uid,
                gid=self.vm_gid,
                inodes=256,
            )
            cgroup = self.cgroups.create_call(vm_id, self._cg_limits)
        except BaseException:
            self._remove_vm_dir(path)
            raise
        return BwrapVm(self, vm_id, path, cgroup)

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._pool) >= self.pool_size:
                    self._cond.wait()
                if self._closed:
                    return
                self._preparing = True
            try:
                vm = self._prepare()
            except (OSError, mounts.MountError, CgroupError) as exc:
                log.warning("preparing a VM failed: %s", exc)
                with self._cond:
                    self._preparing = False
                time.sleep(0.5)
                continue
            with self._cond:
                self._preparing = False
                self._cond.notify_all()
                if self._closed:
                    self.destroy(vm)
                    return
                self._pool.append(vm)

    def settle(self, timeout_s: float = 5.0) -> list[str]:
        """Wait until the pool is full and idle; return the ids of the prepared VMs (for leak checks)."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while (len(self._pool) < self.pool_size or self._preparing) and time.monotonic() < end:
                self._cond.wait(0.01)
            return [vm.id for vm in self._pool]

    def destroy(self, vm: BwrapVm) -> None:
        """Kill the VM's processes, remove its cgroup, unmount and remove its directory."""
        try:
            vm.cgroup.remove()
        except CgroupError as exc:
            log.warning("VM %s: %s", vm.id, exc)
        self._remove_vm_dir(vm.path)

    def _remove_vm_dir(self, path: Path) -> None:
        for point in mounts.mounts_under(path):
            try:
                mounts.unmount(point)
            except mounts.MountError as exc:
                log.warning("%s", exc)
        try:  # the usual case: only the three empty mount points are left
            for sub in ("in", "tool", "out"):
                os.rmdir(path / sub)
            os.rmdir(path)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)

    def _remove_node_dir(self) -> None:
        for point in mounts.mounts_under(self.node_dir):
            with contextlib.suppress(mounts.MountError):
                mounts.unmount(point)
        shutil.rmtree(self.node_dir, ignore_errors=True)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            pool = list(self._pool)
            self._pool.clear()
            self._cond.notify_all()
        self._filler.join(timeout=5)
        for vm in pool:
            vm.delete()
        with contextlib.suppress(CgroupError):
            self.cgroups.remove()
        self._remove_node_dir()


def cleanup_stale(run_dir: Path) -> None:
    """Remove what nodes that died left under `run_dir` and in their cgroups (their pid is in the name)."""
    if not run_dir.is_dir():
        return
    for entry in run_dir.glob("node-*"):
        pid = entry.name.removeprefix("node-")
        if pid.isdigit() and not _pid_alive(int(pid)):
            for point in mounts.mounts_under(entry):
                with contextlib.suppress(mounts.MountError):
                    mounts.unmount(point)
            shutil.rmtree(entry, ignore_errors=True)
            with contextlib.suppress(CgroupError, OSError):
                NodeCgroups.open(f"b3os-node-{pid}").remove()
