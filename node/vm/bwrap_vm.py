"""One bubblewrap VM (see `node/vm/bwrap.py` for the driver and the pool): its sandbox, started before its
call, the hand-over of the command to the launcher, and the supervision of the command until it ends.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from node.errors import NodeError
from node.vm import exits, mounts, pipes
from node.vm.base import InputFile, RunResult, Vm, VmError
from node.vm.cgroups import CallCgroup, CgroupError
from node.vm.collect import read_out_files
from node.vm.usage import UsageMeter


class Owner(Protocol):
    """The driver that made a VM, as the VM uses it (`node.vm.bwrap.BwrapDriver`)."""

    node_dir: Path

    def handed_over(self, vm: BwrapVm) -> None: ...

    def destroy(self, vm: BwrapVm, *, wait: bool = True) -> None: ...


SETUP_S = 10.0  # how long a VM's sandbox may take to come up


def make_dir(path: Path, mode: int) -> None:
    """Make a directory with exactly `mode` (whatever the umask)."""
    path.mkdir(mode=mode, exist_ok=True)
    os.chmod(path, mode)


class SetupError(NodeError):
    """A VM could not be prepared; the message says which step failed."""


KILL_WAIT_S = 2.0
"""The longest a kill waits for the VM's pid namespace to end before killing its cgroup's processes."""


class BwrapVm(Vm):
    """One prepared sandbox: its directory (in/, out/, tool/), its cgroup, and its bwrap waiting to run.

    The sandbox is already set up when the VM is claimed: bwrap has made the namespaces and mounts, is in the
    VM's cgroup, and runs the launcher, which waits for the call's command on `ctl`. `uid` is the VM's host
    uid and gid.
    """

    def __init__(self, driver: Owner, vm_id: str, path: Path, cgroup: CallCgroup, uid: int) -> None:
        self.id = vm_id
        self.path = path
        self.cgroup = cgroup
        self.uid = uid
        self._driver = driver
        self._tool_src: Path | None = None
        self._deleted = False
        self._stopped = False  # every process of the VM killed and waited for (`_stop` ran to its end)
        self.proc: subprocess.Popen[bytes] | None = None
        self.child: int | None = None
        self._status = self._ctl = self._err = -1
        self._cmd = -1  # a pidfd on the launcher, which becomes the command
        self._init = -1  # a pidfd on the VM's init, pid 1 of its pid namespace
        self._init_lock = threading.Lock()  # a cancel's kill and the call's end close_fds run apart

    def start(self, fds: tuple[int, int, int, int]) -> None:
        """With bwrap just started (in the VM's cgroup): let its sandbox go on, wait until the launcher runs.

        Args:
            fds: the node's ends of bwrap's status pipe, its block pipe, the launcher's ctl and err pipes.

        Raises:
            SetupError: bwrap or the launcher did not come up.
        """
        status_r, block_w, ctl_w, err_r = fds
        self._status, self._ctl, self._err = status_r, ctl_w, err_r
        deadline = time.monotonic() + SETUP_S
        first, _ = pipes.read_until(status_r, deadline, line=True)
        child = pipes.json_int(first, "child-pid")
        if child is None:
            os.close(block_w)
            raise SetupError("bwrap did not start the sandbox")
        self.child = child
        self._init = exits.open_pidfd(child)  # (in the VM's cgroup already: bwrap joined it before it began)
        os.write(block_w, b"1")
        os.close(block_w)
        ready, _ = pipes.read_until(err_r, deadline, size=1)
        if ready != b"R":
            raise SetupError("the VM's launcher did not start")
        if not exits.supported():
            return
        launcher = self._sandboxed(exclude=child)
        if len(launcher) != 1:
            raise SetupError(f"the VM runs {len(launcher) + 1} processes before its call, not 2")
        self._cmd = exits.open_pidfd(launcher[0])
        if self._cmd < 0:
            raise SetupError("the VM's launcher process is gone")

    def alive(self) -> bool:
        """True while bwrap runs and the launcher still waits: neither its pidfd nor the init's has turned
        readable (where pidfds are not supported: init and launcher still in the cgroup)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if self._cmd < 0 or self._init < 0:
            return len(self._sandboxed()) >= 2
        ended = select.poll()
        for pidfd in (self._init, self._cmd):
            ended.register(pidfd, select.POLLIN)
        return not ended.poll(0)

    def _sandboxed(self, exclude: int | None = None) -> list[int]:
        """The processes of the VM's cgroup inside the sandbox: all but bwrap's own outside it (which joined
        the group before it made the sandbox, so that the VM's cgroup namespace is rooted at the group)."""
        outside = self.proc.pid if self.proc is not None else None
        return [pid for pid in self.cgroup.pids() if pid not in (outside, exclude)]

    def copy(self, tool_dir: Path, files: Sequence[InputFile]) -> None:
        try:  # readable by the VM's group only
            for f in files:
                field_dir = self.path / "in" / f.field
                make_dir(field_dir, 0o750)
                os.chown(field_dir, 0, self.uid)
                target = field_dir / f.name
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    os.fchown(fd, 0, self.uid)
                    os.fchmod(fd, 0o640)
                    fh.write(f.data)
        except OSError as exc:
            raise VmError(
                "copy", f"the input files could not be put in the VM's /in: {exc.strerror}"
            ) from exc
        self._tool_src = tool_dir

    def unpack(self, runtime: Path | None = None) -> None:
        src = self._tool_src
        if src is None or not src.is_dir():
            raise VmError("unpack", "the tool's unpacked files are missing from the node's install cache")
        try:
            mounts.overlay(src, runtime or self._driver.node_dir / "empty", self.path / "tool")
        except mounts.MountError as exc:
            raise VmError("unpack", f"the tool's files could not be mounted at /tool: {exc}") from exc
        finally:
            self._driver.handed_over(self)

    def listen_unix(self, name: str) -> socket.socket:
        path = self.path / "in" / name
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:  # connectable by the VM's user only (its directory is the VM's alone anyway)
            sock.bind(str(path))
            os.chown(path, 0, self.uid)
            os.chmod(path, 0o660)
            sock.listen(16)
        except OSError as exc:
            sock.close()
            raise VmError("copy", f"the VM's egress socket could not be made: {exc.strerror}") from exc
        return sock

    def share_cpu(self, fraction: float) -> None:
        with contextlib.suppress(CgroupError):  # a VM being deleted has no group to weigh
            self.cgroup.set_cpu_share(fraction)

    def run(self, cmd: Sequence[str], stdin: bytes, *, timeout_s: float, max_stdout: int) -> RunResult:
        deadline = time.monotonic() + timeout_s
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        if timeout_s <= 0:
            raise VmError("no_slot", "the call's time ran out before its command could start")
        self.cgroup.reset_peak()
        meter = UsageMeter(self.cgroup)
        try:
            os.write(self._ctl, b"".join(arg.encode() + b"\0" for arg in cmd))
        except OSError:
            return RunResult(started=False, exec_error="the VM stopped before its command could start")
        finally:
            os.close(self._ctl)
            self._ctl = -1
        got, eof = pipes.read_until(self._err, deadline, size=4)
        if not eof and len(got) < 4:
            raise VmError("no_slot", "the call's time ran out before its command could start")
        if len(got) == 4:
            err = int.from_bytes(got, sys.byteorder)
            return RunResult(
                started=False, exec_error=f"the command could not be executed in the VM: {os.strerror(err)}"
            )
        return self._supervise(proc, meter, stdin, deadline, max_stdout)

    def _supervise(
        self, proc: subprocess.Popen[bytes], meter: UsageMeter, stdin: bytes, deadline: float, max_stdout: int
    ) -> RunResult:
        assert proc.stdin is not None and proc.stdout is not None
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
        os.set_blocking(out_fd, False)
        os.set_blocking(in_fd, False)
        # the command's own exit (the VM's init may be stopped), or bwrap's where pidfds are not supported
        pidfd = os.dup(self._cmd) if self._cmd >= 0 else os.pidfd_open(proc.pid)
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
                        data = pipes.read_some(out_fd)
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
            # The kernel's word on the command's exit, there at once as a rule (the VM's init reaps it):
            # then what the command wrote is all in the pipe, and the VM's other processes are stopped
            # after the answer, by its deletion. Else (a timeout, too much output, an init that does not
            # reap, a kernel before 6.15) they are stopped now and stdout is read to its end.
            status = exits.exit_status(self._cmd) if exited and self._cmd >= 0 else None
            if status is None:
                self._stop()
            if not result.stdout_too_large:
                rest = pipes.drain(out_fd, max_stdout + 1 - size, wait=status is None)
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
        if status is None and self._cmd >= 0:
            status = exits.exit_status(self._cmd)
        if status is not None:  # the kernel's word on the command's own exit
            ended = os.waitstatus_to_exitcode(status)
            result.signal, result.exit_code = (-ended, None) if ended < 0 else (None, ended)
            return result
        # a kernel before 6.15: bwrap's report (a tool that stops the VM's init can hold it back)
        line, _ = pipes.read_until(self._status, time.monotonic() + 0.5, line=True)
        code = pipes.json_int(line, "exit-code")
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

    def _stop(self) -> None:
        """Kill every process of the VM, wait for bwrap and reap the VM's init (once: the call's end stops
        the VM and its deletion then has nothing left to stop; a cancel's `kill` is apart)."""
        if self._stopped:
            return
        self.kill()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        if self.child is not None:
            reap(self.child)
            self.child = None
        self._stopped = True

    def close_fds(self) -> None:
        """Close the node's ends of the VM's pipes (safe to call twice)."""
        with self._init_lock:
            for name in ("_status", "_ctl", "_err", "_cmd", "_init"):
                fd = getattr(self, name)
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                    setattr(self, name, -1)
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None and not stream.closed:
                    with contextlib.suppress(OSError):
                        stream.close()

    def collect(self, names: Sequence[str], *, max_total: int) -> dict[str, bytes]:
        self._stop()  # no process of the VM writes to /out while it is read
        return read_out_files(self.path / "out", names, max_total=max_total)

    def kill(self) -> None:
        """Kill every process of the VM at once. SIGKILL to the init of its pid namespace makes the kernel
        kill the whole namespace in one step, so no process of the tool runs on after another is gone (a
        shell printing a success line once its `sleep` was killed); the init's pidfd turns readable only
        once the kernel has killed and waited for every other process of the namespace, so that is waited
        for (`KILL_WAIT_S` at most). The cgroup's kill then takes bwrap and anything left; on cgroup v1 it
        signals one process after another in pid order, which after the pids wrap can be a child before
        its parent."""
        with self._init_lock:  # its own copy: the call's end may close the VM's at any time
            init = os.dup(self._init) if self._init >= 0 else -1
        if init >= 0:
            try:
                signal.pidfd_send_signal(init, signal.SIGKILL)
                poller = select.poll()
                poller.register(init, select.POLLIN)
                poller.poll(int(KILL_WAIT_S * 1000))
            except ProcessLookupError:
                pass  # it has ended
            finally:
                os.close(init)
        self.cgroup.kill()

    def delete(self) -> None:
        if self._deleted:
            return
        self._deleted = True
        self._driver.handed_over(self)
        self._driver.destroy(self, wait=False)


def reap(pid: int) -> None:
    """Reap the VM's init: when bwrap's monitor exits first it is orphaned to us, the child subreaper."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
