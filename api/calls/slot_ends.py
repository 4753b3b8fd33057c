"""When a running call is expected to end, and so free its slot: the Retry-After of a call refused
concurrency_limited or node_busy (api.calls.limits).

A running call is expected at its start plus the longest time of the last `TYPICAL_OF` finished calls of
the same action version (started to finished, as the api saw them: the time a slot was held), never past
its deadline. The longest, not a percentile or the mean, so that the answer is never shorter than the
wait by design (a caller that comes back too early is refused again), and with calls that take about the
same time it stays close to it (tests/calls/test_call_limits.py: at most 1.5x with 4 s calls). The
deadline itself counts while that action has not finished a call yet, or once the call runs longer than
every one of them (it may hang, or its api process died).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import bindparam, select

from api import rawsql
from api.calls.tables import DONE, ActionCall
from api.rawsql import Transaction

TYPICAL_OF = 20
"""Finished calls of an action version whose times predict when its running calls end (the longest)."""


def soonest_end(calls: Sequence[ActionCall], now: dt.datetime) -> float:
    """Seconds until the soonest of `calls` must have ended (its deadline)."""
    return min((c.deadline_at - now).total_seconds() for c in calls) if calls else 1.0


_CALLS = ActionCall.__table__  # type: ignore[attr-defined]
_LAST_TIMES = (
    select(_CALLS.c.started_at, _CALLS.c.finished_at)
    .where(
        _CALLS.c.pack == bindparam("pack"),
        _CALLS.c.version == bindparam("version"),
        _CALLS.c.action == bindparam("action"),
        _CALLS.c.state == DONE,
    )
    .order_by(_CALLS.c.finished_at.desc())
    .limit(TYPICAL_OF)
)


def _longest_s(session: Transaction, pack: str, version: str, action: str) -> float | None:
    """The longest time of the last `TYPICAL_OF` finished calls of an action version, started to finished
    (None before its first)."""
    rows = rawsql.execute(session, _LAST_TIMES, {"pack": pack, "version": version, "action": action}).rows
    times = [(end - start).total_seconds() for start, end in rows if end is not None]
    return max(times) if times else None


def expected_end(session: Transaction, calls: Sequence[ActionCall], now: dt.datetime) -> float:
    """Seconds until the soonest of `calls` is expected to end (see the module's docstring); 1 with none."""
    if not calls:
        return 1.0
    longest: dict[tuple[str, str, str], float | None] = {}
    soonest = float("inf")
    for c in calls:
        what = (c.pack, c.version, c.action)
        if what not in longest:
            longest[what] = _longest_s(session, *what)
        deadline = (c.deadline_at - now).total_seconds()
        took = longest[what]
        expected = deadline if took is None else (c.started_at - now).total_seconds() + took
        if expected <= 0:
            expected = deadline  # running longer than any call of its kind: it may hang, or its api died
        soonest = min(soonest, max(0.0, min(expected, deadline)))
    return soonest
