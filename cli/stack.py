"""A small foreground process supervisor: start children, wait for readiness, stop them all.

`b3os dev` (and later `b3os demo`) starts each service as a child with `Stack.start(...)`, which
waits until the child's `ready` probe answers. `Stack.wait()` blocks until Ctrl-C / SIGTERM or
until a child exits on its own; `Stack.stop()` stops every child, newest first (SIGTERM to the
child's own process group, SIGKILL after a grace period). Each child's output goes to
`<log_dir>/<name>.log`. Adding a service is one `start(...)` call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any


class StackError(Exception):
    """A child failed to start or to become ready (the sentence names it and its log)."""


@dataclass
class Child:
    """A started child process."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]


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
    ) -> Child:
        """Start a child and wait until `ready()` is true (or raise StackError, leaving it stopped)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        process = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child = Child(name=name, process=process, log_path=log_path, log=log)
        self.children.append(child)
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
        """Block until a stop is requested (0) or a child exits on its own (1)."""
        while not self._stop_requested:
            for child in self.children:
                code = child.process.poll()
                if code is not None:
                    print(f"b3os: {child.name} exited with code {code}: see {child.log_path}", flush=True)
                    return 1
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        """Stop every child, newest first: SIGTERM to its group, SIGKILL after the grace period."""
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
        self.children.clear()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)  # the child leads its own session: this reaches only its processes
    except ProcessLookupError:
        pass
