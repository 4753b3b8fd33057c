"""`Server-Timing` (W3C Server Timing) on the answers whose parts a client or an operator wants to see: a
run start's phases (api.runs.starts), so that a slow start says where its time went without a profiler.

A route calls `begin()` for its request and sets `header(...)` on its answer; the services it awaits,
and the worker threads they hand work to (anyio copies the request's context into them), time their
parts with `phase(name)`. Outside such a request `phase` times nothing. Each part is
`<name>;dur=<ms>`, in the order the parts ended; a part that waits for a worker thread or the
database's writers' turn counts that wait.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Phases = list[tuple[str, float]]

_phases: ContextVar[Phases | None] = ContextVar("b3os_server_timing", default=None)


def begin() -> Phases:
    """Start timing this request's parts; the list `phase` appends to."""
    phases: Phases = []
    _phases.set(phases)
    return phases


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as part `name` of the request being timed (nothing when none is)."""
    phases = _phases.get()
    if phases is None:
        yield
        return
    began = time.perf_counter()
    try:
        yield
    finally:
        phases.append((name, (time.perf_counter() - began) * 1000))


def header(phases: Phases) -> str:
    """The `Server-Timing` header's value: `ready;dur=3.1, temporal;dur=12.0`."""
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in phases)
