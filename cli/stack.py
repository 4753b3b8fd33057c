"""A small foreground process supervisor: start children, wait for readiness, keep them up, stop them all.

`b3os dev` (and `b3os demo`) starts each service as a child with `Stack.start(...)`, which waits until
the child's `ready` probe answers. `Stack.wait()` blocks until Ctrl-C / SIGTERM and keeps the children
up meanwhile: a child that exits (any exit) is started again with the same command after a backoff
(`cli.supervise`: 0.5 s doubling to 10 s, reset once it ran 30 s), said on stderr as one line; what is
left of its process group is killed first. The other children keep running. `Stack.stop()` stops every
child, newest first (SIGTERM to the child's own process group, SIGKILL after a grace period); a
descendant that left the group (its own session, or one the child's exit re-parented) is killed too,
after the same grace period. Each child's output goes to `<log_dir>/<name>.log` (a restart appends).
Adding a service is one `start(...)` call. `port_taken(port)` tells whether a loopback port is in use
(check before starting a child on it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from cli._http import CliError
from cli.supervise import Restarts, restart_line


class StackError(CliError):
    """A child failed to start or to become ready (the sentence names it and its log)."""


@dataclass
class Child:
    """A started child process, and how to start it again."""

    name: str
    log_path: Path
    log: IO[bytes]
    argv: list[str]
    env: dict[str, str] | None
    cwd: Path | None
    umask: int
    process: subprocess.Popen[bytes] = field(init=False)
    started_at: float = 0.0
    restarts: Restarts = field(default_factory=Restarts)
    restart_at: float | None = None  # when it died: the time of its next start

    def spawn(self) -> None:
        """Start the child's command (again), its output appended to its log."""
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=self.umask,
        )
        self.started_at = time.monotonic()
        self.restart_at = None


class Stack:
    """Children started in order and stopped in reverse order."""

    def __init__(self, log_dir: Path, *, grace_s: float = 10.0) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.children: list[Child] = []
        self._stop_requested = False

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[], bool] | None = None,
        ready_timeout_s: float = 60.0,
        umask: int = -1,
    ) -> Child:
        """Start a child and wait until `ready()` is true (or raise StackError, leaving it stopped);
        `umask` is the child's (-1: this process's)."""
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        child = Child(name, log_path, log, list(argv), dict(env) if env is not None else None, cwd, umask)
        child.spawn()
        self.children.append(child)
        process = child.process
        if ready is None:
            return child
        deadline = time.monotonic() + ready_timeout_s
        while not ready():
            code = process.poll()
            if code is not None:
                raise StackError(f"{name} exited with code {code} while starting: see {log_path}")
            if self._stop_requested:
                raise StackError(f"stopped while {name} was starting")
            if time.monotonic() > deadline:
                raise StackError(f"{name} was not ready within {ready_timeout_s:.0f} s: see {log_path}")
            time.sleep(0.1)
        return child

    @property
    def stop_requested(self) -> bool:
        """Whether Ctrl-C / SIGTERM (or `request_stop`) asked the stack to stop."""
        return self._stop_requested

    def request_stop(self, *_: Any) -> None:
        """Ask `wait()` to return (a signal handler)."""
        self._stop_requested = True

    def install_signal_handlers(self) -> None:
        """Make SIGINT and SIGTERM end `wait()` (and any readiness wait) cleanly."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request_stop()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def wait(self) -> int:
        """Block until a stop is requested (then 0), restarting each child that exits meanwhile."""
        while not self._stop_requested:
            self.supervise_once(time.monotonic())
            time.sleep(0.1)
        return 0

    def supervise_once(self, now: float) -> None:
        """One look at every child: one that died gets its restart scheduled (said on stderr); one whose
        restart is due is started again."""
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at and not self._stop_requested:
                    child.spawn()
                continue
            code = child.process.poll()
            if code is None:
                continue
            # what the dead child left in its group (a tool it ran, say) goes with it
            _signal_group_of(child.process.pid, signal.SIGKILL)
            delay = child.restarts.died(now=now, ran_s=now - child.started_at)
            child.restart_at = now + delay
            line = restart_line(child.name, code, child.restarts, delay, child.log_path)
            print(line, file=sys.stderr, flush=True)

    def stop(self) -> None:
        """Stop every child, newest first: SIGTERM to its group, SIGKILL after the grace period.

        Descendants of the children that are still alive once the children are gone (a process that
        made its own session, say) get SIGKILL too.
        """
        descendants = _descendants({c.process.pid for c in self.children if c.process.poll() is None})
        for child in reversed(self.children):
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for child in reversed(self.children):
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait()
            child.log.close()
        for pid, started in descendants.items():
            if _start_time(pid) == started:  # the same process, not a new one under a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.children.clear()


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """True when something listens on (or holds) `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _start_time(pid: int) -> str | None:
    """The start time field of /proc/<pid>/stat (None when the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def _descendants(roots: set[int]) -> dict[int, str]:
    """Every live descendant of `roots` (not the roots), by pid, with its start time."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [pid for root in roots for pid in children.get(root, [])]
    while todo:
        pid = todo.pop()
        started = _start_time(pid)
        if started is not None and pid not in found:
            found[pid] = started
            todo.extend(children.get(pid, []))
    return found


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is not None:
        return
    _signal_group_of(process.pid, sig)


def _signal_group_of(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)  # the child leads its own session: this reaches only its processes
    except (ProcessLookupError, PermissionError):
        pass
