"""One microVM (see `node/vm/microvm.py` for the driver and the pool): its QEMU process, the channel to its
init (`node/vm/guest_init.py`, the protocol is in its docstring) and the call's phases over that channel.

The channel is a virtio-serial port whose host end is a unix socket in the VM's directory: QEMU listens
there and waits (`server=on,wait=on`) until the node connects, so nothing the guest says is lost, and the
first message is the guest's "ready" once its init runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from node.errors import NodeError
from node.vm.base import InputFile, OutputFileError, RunResult, Usage, Vm, VmError
from node.vm.cgroups import CallCgroup, CgroupError
from node.vm.guest_init import HEAD, MAX_HEADER
from node.vm.sandbox import VmLimits


class Owner(Protocol):
    """The driver that booted a microVM, as the VM uses it (`node.vm.microvm.MicroVmDriver`)."""

    limits: VmLimits

    def tool_tree(self, src: Path) -> tuple[list[dict[str, Any]], bytes]: ...

    def destroy(self, vm: MicroVm) -> None: ...


STEP_S = 30.0  # how long a hand-over step (copy, unpack, collect) may take in the guest


class ChannelClosed(NodeError):
    """The guest's channel closed or did not answer in time (the message says which)."""


class Channel:
    """Messages to and from the guest's init over the port's unix socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, header: dict[str, Any], data: bytes = b"") -> None:
        head = json.dumps(header).encode()
        self.sock.settimeout(STEP_S)
        try:
            self.sock.sendall(HEAD.pack(len(head), len(data)) + head)
            if data:
                self.sock.sendall(data)
        except OSError as exc:
            raise ChannelClosed(f"the VM stopped answering: {exc}") from exc

    def _exact(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the guest did not answer in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except TimeoutError:
                raise
            except OSError as exc:
                raise ChannelClosed(f"the VM's channel failed: {exc}") from exc
            if not chunk:
                raise ChannelClosed("the VM stopped answering")
            buf += chunk
        return bytes(buf)

    def receive(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        """One message, by `deadline` (`time.monotonic()`).

        Raises:
            TimeoutError: nothing complete came by then.
            ChannelClosed: the guest is gone.
        """
        head_len, data_len = HEAD.unpack(self._exact(HEAD.size, deadline))
        if head_len > MAX_HEADER or data_len > 64 << 20:
            raise ChannelClosed("the VM sent a message larger than the protocol allows")
        header = json.loads(self._exact(head_len, deadline))
        return header, self._exact(data_len, deadline)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def tree_entries(root: Path) -> tuple[list[dict[str, Any]], bytes]:
    """The entries of an installed tool tree for the guest (directories, files with their modes, symlinks)
    and the files' bytes in order.

    Raises:
        OSError: the tree cannot be read.
    """
    entries: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for here, dirs, files in os.walk(root, onerror=_raise):
        dirs.sort()
        rel_dir = os.path.relpath(here, root)
        for name in sorted([*dirs, *files]):
            full = os.path.join(here, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            st = os.lstat(full)
            if os.path.islink(full):
                entries.append({"path": rel, "kind": "l", "target": os.readlink(full)})
            elif name in dirs:
                entries.append({"path": rel, "kind": "d", "mode": st.st_mode & 0o777})
            elif os.path.isfile(full):
                with open(full, "rb") as fh:
                    data = fh.read()
                entries.append({"path": rel, "kind": "f", "mode": st.st_mode & 0o777, "size": len(data)})
                parts.append(data)
    return entries, b"".join(parts)


def _raise(exc: OSError) -> None:
    raise exc


class MicroVm(Vm):
    """One booted microVM: its QEMU (as the VM's host uid, in the VM's cgroup) and the channel to its init."""

    def __init__(self, driver: Owner, vm_id: str, path: Path, cgroup: CallCgroup, uid: int) -> None:
        self.id = vm_id
        self.path = path
        self.cgroup = cgroup
        self.uid = uid
        self._driver = driver
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: Channel | None = None
        self.boot_ms = 0.0
        self._tool_src: Path | None = None
        self._killed = threading.Event()
        self._deleted = False

    def boot(self, argv: list[str], pass_fds: Sequence[int], deadline: float) -> None:
        """Start QEMU, connect to its port and wait for the guest's "ready".

        Raises:
            ChannelClosed: QEMU or the guest did not come up by `deadline`.
        """
        started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=pass_fds, start_new_session=True, cwd="/", env={},
        )  # fmt: skip
        sock_path = self.path / "port.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        while True:
            try:
                sock.connect(str(sock_path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    sock.close()
                    raise ChannelClosed(f"QEMU did not start: {self._qemu_error()}") from None
                time.sleep(0.005)
        self.channel = Channel(sock)
        try:
            header, _ = self.channel.receive(deadline)
        except TimeoutError:
            raise ChannelClosed("the guest did not boot in time") from None
        except ChannelClosed as exc:
            raise ChannelClosed(f"the guest stopped while it booted: {self._qemu_error()}") from exc
        if not header.get("ready"):
            raise ChannelClosed("the guest's first message was not ready")
        self.boot_ms = round((time.monotonic() - started) * 1000, 2)

    def _qemu_error(self) -> str:
        if self.proc is None or self.proc.poll() is None or self.proc.stderr is None:
            return "no word from QEMU"
        text = self.proc.stderr.read(2000).decode(errors="replace").strip()
        return text.splitlines()[-1] if text else f"QEMU exited with status {self.proc.returncode}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.channel is not None

    def _ask(self, header: dict[str, Any], data: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """One step of the hand-over (or the collect) and the guest's answer.

        Raises:
            VmError: reason "exec": the VM was killed (the call was cancelled) before its command ran.
            ChannelClosed: the guest stopped answering.
        """
        assert self.channel is not None
        try:
            self.channel.send(header, data)
            return self.channel.receive(time.monotonic() + STEP_S)
        except TimeoutError:
            raise ChannelClosed("the VM did not answer in time") from None
        except ChannelClosed:
            if self._killed.is_set() and header.get("op") != "collect":
                raise VmError("exec", "the call was cancelled before its command started") from None
            raise

    def share_cpu(self, fraction: float) -> None:
        with contextlib.suppress(CgroupError):  # a VM being deleted has no group to weigh
            self.cgroup.set_cpu_share(fraction)

    def copy(self, tool_dir: Path, files: Sequence[InputFile]) -> None:
        entries: list[dict[str, Any]] = []
        for field in dict.fromkeys(f.field for f in files):
            entries.append({"path": field, "kind": "d"})
        entries += [{"path": f"{f.field}/{f.name}", "kind": "f", "size": len(f.data)} for f in files]
        total = sum(len(f.data) for f in files)
        limit = self._driver.limits.in_kb << 10
        if total > limit - 64 * 1024:  # a little room for the directories; the sandbox's words
            raise VmError("copy", "the input files could not be put in the VM's /in: No space left on device")
        try:
            answer, _ = self._ask({"op": "files", "entries": entries}, b"".join(f.data for f in files))
        except ChannelClosed as exc:
            raise VmError("copy", f"the input files could not be put in the VM: {exc}") from exc
        if "error" in answer:
            raise VmError("copy", f"the input files could not be put in the VM's /in: {answer['error']}")
        self._tool_src = tool_dir

    def unpack(self, runtime: Path | None = None) -> None:
        if runtime is not None:
            raise VmError("exec", "js actions run in the sandbox driver, which did not start on this node")
        src = self._tool_src
        if src is None or not src.is_dir():
            raise VmError("unpack", "the tool's unpacked files are missing from the node's install cache")
        try:
            entries, data = self._driver.tool_tree(src)
        except OSError as exc:
            raise VmError("unpack", f"the tool's files could not be read: {exc.strerror}") from exc
        # the tree is the cache's and fine: what fails from here is the VM's, a `copy` (`unpack` would
        # drop the version from the cache)
        try:
            answer, _ = self._ask({"op": "tool", "entries": entries}, data)
            if "error" not in answer:
                answer, _ = self._ask({"op": "unpack"})
        except ChannelClosed as exc:
            raise VmError("copy", f"the tool's files could not be put in the VM: {exc}") from exc
        if "error" in answer:
            raise VmError("copy", f"the tool's files could not be written at /tool: {answer['error']}")

    def run(self, cmd: Sequence[str], stdin: bytes, *, timeout_s: float, max_stdout: int) -> RunResult:
        if timeout_s <= 0:
            raise VmError("no_slot", "the call's time ran out before its command could start")
        assert self.channel is not None
        started = time.monotonic()
        deadline = started + timeout_s
        meter = self._vm_meter()
        try:
            self.channel.send({"op": "run", "cmd": list(cmd), "max_stdout": max_stdout}, stdin)
            answer, stdout = self.channel.receive(deadline)
        except TimeoutError:
            usage = meter()
            self.kill()
            return RunResult(started=True, timed_out=True, usage=usage)
        except ChannelClosed:
            if self._killed.is_set():  # cancelled: the VM was killed under the command
                return RunResult(started=True, signal=9, usage=meter())
            return RunResult(started=True, lost=True, usage=meter())
        if not answer.get("started"):
            return RunResult(
                started=False,
                exec_error=f"the command could not be executed in the VM: {answer.get('exec_error', '')}",
            )
        run_ms = float(answer.get("run_ms", 0))
        gib = int(answer.get("maxrss_kb", 0)) / (1 << 20)
        usage = Usage(
            vcpu_ms=max(1, math.ceil(float(answer.get("cpu_ms", 0)))),
            gib_ms=max(1, math.ceil(gib * run_ms)),
        )
        return RunResult(
            started=True,
            exit_code=answer.get("exit_code"),
            signal=answer.get("signal"),
            stdout=stdout,
            stdout_too_large=bool(answer.get("stdout_too_large")),
            oom_killed=bool(answer.get("oom_killed")),
            usage=usage,
        )

    def _vm_meter(self) -> Callable[[], Usage]:
        """What the VM (QEMU's cgroup) used from now until the returned function is called: the usage of a
        call whose guest could not say its command's own (timed out, cancelled, the VM gone)."""
        started = time.monotonic()
        try:
            cpu0, mem0 = self.cgroup.cpu_ns(), self.cgroup.memory_bytes()
        except CgroupError:
            cpu0, mem0 = None, 0

        def used() -> Usage:
            if cpu0 is None:
                return Usage(1, 1)
            try:
                cpu, mem = self.cgroup.cpu_ns() - cpu0, self.cgroup.memory_bytes() - mem0
            except CgroupError:
                return Usage(1, 1)
            ms = (time.monotonic() - started) * 1000
            return Usage(max(1, math.ceil(cpu / 1e6)), max(1, math.ceil(max(mem, 0) / (1 << 30) * ms)))

        return used

    def collect(self, names: Sequence[str], *, max_total: int) -> dict[str, bytes]:
        if not names:
            return {}
        try:
            answer, data = self._ask({"op": "collect", "names": list(names), "max_total": max_total})
        except ChannelClosed as exc:
            raise OutputFileError(f"the output files could not be read: {exc}") from exc
        if "error" in answer:
            raise OutputFileError(str(answer["error"]))
        out: dict[str, bytes] = {}
        offset = 0
        for name, size in zip(names, answer["sizes"], strict=True):
            out[name] = data[offset : offset + size]
            offset += size
        return out

    def kill(self) -> None:
        self._killed.set()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.channel is not None:
            with contextlib.suppress(OSError):
                self.channel.sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Kill QEMU and every process of the VM's cgroup, and wait until they are gone."""
        self.kill()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
        with contextlib.suppress(CgroupError):
            self.cgroup.kill()
        if self.channel is not None:
            self.channel.close()

    def remove(self) -> None:
        """Remove the VM's cgroup and directory (its processes are gone)."""
        with contextlib.suppress(CgroupError):
            self.cgroup.remove()
        shutil.rmtree(self.path, ignore_errors=True)

    def delete(self) -> None:
        if self._deleted:
            return
        self._deleted = True
        self._driver.destroy(self)
