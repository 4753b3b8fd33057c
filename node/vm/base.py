"""The VM driver interface, in the seed's phases: start (claim), copy, unpack, run, collect, delete.

A driver hands out VMs; a VM serves exactly one call and is then deleted, never reused. The runner times each
phase (`PhaseClock`) and returns the timings with the answer.

Errors:

    VmError                 a phase failed before the tool's command ran; `reason` is the seed's
      ├ reason "no_slot"    no free VM, or the call's time ran out before its command could start
      ├ reason "copy"       the tool or an input file could not be put in the VM
      ├ reason "unpack"     the tool's files could not be made ready in the VM
      └ reason "exec"       the command could not be started
    OutputFileError         an output file the tool named is not a regular file directly under /out
"""

from __future__ import annotations

import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from node.errors import NodeError

PHASES = ("start", "copy", "unpack", "run", "collect", "delete")


class VmError(NodeError):
    """A VM phase failed before the command ran."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class OutputFileError(NodeError):
    """An output file the tool named cannot be returned; the message says which and why."""


@dataclass(frozen=True)
class InputFile:
    """One input file of a call, put at /in/<field>/<name>."""

    field: str
    name: str
    data: bytes
    content_type: str

    @property
    def vm_path(self) -> str:
        """Where the tool sees the file."""
        return f"/in/{self.field}/{self.name}"


@dataclass
class Usage:
    """What the VM used: CPU in vCPU-ms and memory in GiB-ms, both rounded up."""

    vcpu_ms: int = 0
    gib_ms: int = 0


@dataclass
class RunResult:
    """How the command ended.

    `started` is False when the command never started (then `exec_error` says why). `exit_code` is the
    command's exit status and `signal` the signal that killed it (one of them is set when it ended by itself).
    """

    started: bool
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stdout: bytes = b""
    stdout_too_large: bool = False
    oom_killed: bool = False
    lost: bool = False
    exec_error: str = ""
    usage: Usage = field(default_factory=Usage)


class Vm(ABC):
    """One VM for one call."""

    id: str

    @abstractmethod
    def copy(self, tool_dir: Path, files: Sequence[InputFile]) -> None:
        """Put the tool's files (read-only at /tool) and the input files (read-only under /in) in the VM.

        Raises:
            VmError: reason "copy".
        """

    @abstractmethod
    def unpack(self, runtime: Path | None = None) -> None:
        """Make the tool's files ready at /tool (over `runtime`'s, a js call's Node.js and harness).

        Raises:
            VmError: reason "unpack".
        """

    def listen_unix(self, name: str) -> socket.socket:
        """A listening unix socket the VM's user can connect to at /in/<name> (a js call's egress relay).

        Raises:
            VmError: reason "copy": the socket could not be made.
        """
        raise VmError("copy", "this VM driver gives a VM no socket")

    @abstractmethod
    def run(self, cmd: Sequence[str], stdin: bytes, *, timeout_s: float, max_stdout: int) -> RunResult:
        """Run `cmd` without a shell in /work as the VM's user, `stdin` on its stdin, stderr discarded.

        Reading stops past `max_stdout` bytes of stdout (then the VM is stopped). Raises nothing about the
        command itself: how it ended is in the result.

        Raises:
            VmError: reason "no_slot" when the time ran out before the command started.
        """

    @abstractmethod
    def collect(self, names: Sequence[str], *, max_total: int) -> dict[str, bytes]:
        """Read the named output files from /out.

        Raises:
            OutputFileError: a name is not a regular file directly under /out, or the files pass `max_total`.
        """

    @abstractmethod
    def kill(self) -> None:
        """Kill every process of the VM now (called from another thread: the call was cancelled).

        A `run` in progress then returns how the command ended (killed by SIGKILL).
        """

    @abstractmethod
    def delete(self) -> None:
        """Stop every process of the VM and remove everything it had. Safe to call twice."""

    def share_cpu(self, fraction: float) -> None:  # noqa: B027 - a driver without CPU weights ignores it
        """Weigh this VM's CPU at `fraction` of a whole VM's against the node's other VMs (best effort)."""


class VmDriver(ABC):
    """Hands out fresh VMs."""

    name: str

    @abstractmethod
    def claim(self, deadline: float) -> Vm:
        """A fresh VM, ready for `copy`.

        Args:
            deadline: `time.monotonic()` value past which the call cannot use a VM any more.

        Raises:
            VmError: reason "no_slot".
        """

    @abstractmethod
    def close(self) -> None:
        """Delete the prepared VMs and everything the driver made."""

    def pool_ready(self) -> int:
        """VMs prepared ahead and waiting for a call (0 for a driver without a pool)."""
        return 0

    def pool_target(self) -> int:
        """How many VMs the driver keeps prepared ahead."""
        return 0

    def boots_ms(self) -> list[float]:
        """How long its last VMs took to boot, in ms (empty for a driver whose VMs do not boot)."""
        return []


class PhaseClock:
    """Times the phases of one call in milliseconds."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name` (the time is kept even when the block raises)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = round((time.perf_counter() - started) * 1000, 2)

    def as_dict(self) -> dict[str, float]:
        """The timings of the phases that ran, in the seed's order."""
        return {name: self.ms[name] for name in PHASES if name in self.ms}
