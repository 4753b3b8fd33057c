"""What ended calls were charged and metered, added up as each call ends: per key and month, and per run.

A call's admission holds limits against these sums (`api.calls.limits`, `api.calls.run_cost`): an
organization's publishers' prices this month, a key's charges this month against its spend cap, a run's
charges against its max cost. Summed from the calls' rows, each admission read every call of the month
(or of the run) while it held the database's one writer: a capped key's admission and end took 6.5 ms
after 10,000 calls in a month and 77 ms after 100,000 (`bench admissions`), and a foreach's items each
read all the run's calls before them. Here each sum is one row, so an admission's cost no longer grows
with what the key or the run has done. `GET /v1/usage` reads a month's key rows too (their calls,
charges and units, `api.calls.metering.usage`), not the month's calls and meter events (since round 36:
268 ms after 100,000 calls in a month).

`add` runs in the transaction that ends the call (`api.calls.metering.record`, only when that
transaction is the one that ended the row), so each sum equals its rows' at every commit. A call counts
in the month it ended in (UTC), as `GET /v1/usage` counts its cost and units and the earnings its sale
(until round 35 the limits counted it in the month it started in: a call across midnight at a month's
end counted in one month here and in the next in the usage).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlalchemy import bindparam, func
from sqlalchemy import select as sa_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.selectable import ScalarSelect
from sqlmodel import Session, col, select

from api import rawsql
from api.calls.tables import ActionCall, KeySpend, RunCharge
from api.rawsql import Transaction

_KEYS = KeySpend.__table__  # type: ignore[attr-defined]
_RUNS = RunCharge.__table__  # type: ignore[attr-defined]


SUMS = (
    "calls",
    "compute",
    "floor",
    "price",
    "total",
    "vcpu_ms",
    "gib_ms",
    "tool_calls",
    "publisher_microusd",
    "action_calls",
)
"""A key's month's sums: its calls, their charges and their units (`add` adds a call's to each)."""


def _adds(insert: type[sqlite.Insert] | type[postgresql.Insert]) -> tuple[Insert, Insert]:
    """The two upserts in one dialect (INSERT ... ON CONFLICT DO UPDATE: SQLite and PostgreSQL alike)."""
    key = insert(_KEYS)
    run = insert(_RUNS)
    return (
        key.on_conflict_do_update(
            index_elements=[_KEYS.c.key_id, _KEYS.c.month],
            set_={name: _KEYS.c[name] + key.excluded[name] for name in SUMS},
        ),
        run.on_conflict_do_update(
            index_elements=[_RUNS.c.run_id], set_={"total": _RUNS.c.total + run.excluded.total}
        ),
    )


_ADDS = {"sqlite": _adds(sqlite.Insert), "postgresql": _adds(postgresql.Insert)}
_ORG_PRICES = sa_select(func.coalesce(func.sum(_KEYS.c.price), 0)).where(
    _KEYS.c.org_id == bindparam("org"), _KEYS.c.month == bindparam("month")
)
_KEY_TOTAL = sa_select(_KEYS.c.total).where(
    _KEYS.c.key_id == bindparam("key"), _KEYS.c.month == bindparam("month")
)


def month_of(at: dt.datetime) -> str:
    """The month `at` falls in, UTC, as the sums name it: `YYYY-MM`."""
    return at.astimezone(dt.UTC).strftime("%Y-%m")


def add(session: Transaction, *, call: ActionCall, sums: Mapping[str, int], now: dt.datetime) -> None:
    """Add an ended call to its key's month (`now`'s, when it ended): one call, and its `sums` (charges
    and units by their names in `SUMS`; a name left out adds 0); and its total to its run's. In the
    transaction that ended it."""
    add_key, add_run = _ADDS[session.get_bind().dialect.name]
    params = {"key_id": call.key_id, "month": month_of(now), "org_id": call.org_id}
    rawsql.execute(session, add_key, {**params, **dict.fromkeys(SUMS, 0), **sums, "calls": 1})
    total = sums.get("total", 0)
    if call.run_id is not None and total > 0:
        rawsql.execute(session, add_run, {"run_id": call.run_id, "total": total})


def of_month(session: Session, *, org_id: str, month: str) -> list[KeySpend]:
    """An organization's keys' sums for a month (`YYYY-MM`), by key id."""
    rows = session.exec(
        select(KeySpend)
        .where(col(KeySpend.org_id) == org_id, col(KeySpend.month) == month)
        .order_by(col(KeySpend.key_id))
    )
    return list(rows)


def org_prices(session: Transaction, *, org_id: str, now: dt.datetime) -> int:
    """The publishers' prices an organization's calls that ended in `now`'s month were charged."""
    return int(rawsql.execute(session, _ORG_PRICES, {"org": org_id, "month": month_of(now)}).scalar() or 0)


def key_total(session: Transaction, *, key_id: str, now: dt.datetime) -> int:
    """What a key's calls that ended in `now`'s month were charged, in all."""
    return int(rawsql.execute(session, _KEY_TOTAL, {"key": key_id, "month": month_of(now)}).scalar() or 0)


def run_total_of(run_id: ColumnElement[str]) -> ScalarSelect[int]:
    """What the run `run_id` names has been charged for its ended calls, as a scalar subquery (NULL: nothing
    yet), for a statement that reads it with the run's running calls in one snapshot."""
    return sa_select(_RUNS.c.total).where(_RUNS.c.run_id == run_id).scalar_subquery()
