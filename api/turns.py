"""Turns per organization within one api process: at most a few of an organization's requests of one
kind at work at once, the others waiting in order, so that one organization's burst does not take the
process (run starts: `api.runs.limits`; routine and manifest checks: `api.checker`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

Gates = dict[str, tuple[AbstractAsyncContextManager[object], list[int]]]
"""Per organization with a request in flight: its gate, and how many requests hold or wait for it."""


@asynccontextmanager
async def org_turn(
    gates: Gates, org_id: str, new_gate: Callable[[], AbstractAsyncContextManager[object]]
) -> AsyncIterator[None]:
    """Wait for the organization's gate (made by `new_gate` for its first request) and hold it; an
    organization's entry is removed once none of its requests holds or waits for it."""
    gate, users = gates.setdefault(org_id, (new_gate(), [0]))
    users[0] += 1
    try:
        async with gate:
            yield
    finally:
        users[0] -= 1
        if not users[0]:
            del gates[org_id]
