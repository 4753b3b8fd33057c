"""What ended calls were charged, added up as each call ends: per key and month, and per run.

A call's admission holds limits against these sums (`api.calls.limits`, `api.calls.run_cost`): an
organization's publishers' prices this month, a key's charges this month against its spend cap, a run's
charges against its max cost. Summed from the calls' rows, each admission read every call of the month
(or of the run) while it held the database's one writer: a capped key's admission and end took 6.5 ms
after 10,000 calls in a month and 77 ms after 100,000 (`bench admissions`), and a foreach's items each
read all the run's calls before them. Here each sum is one row, so an admission's cost no longer grows
with what the key or the run has done.

`add` runs in the transaction that ends the call (`api.calls.metering.record`, only when that
transaction is the one that ended the row), so each sum equals its rows' at every commit. A call counts
in the month it ended in (UTC), as `GET /v1/usage` counts its cost and units and the earnings its sale
(until round 35 the limits counted it in the month it started in: a call across midnight at a month's
end counted in one month here and in the next in the usage).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import bindparam, func
from sqlalchemy import select as sa_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.selectable import ScalarSelect
from sqlmodel import Session

from api import rawsql
from api.calls.tables import ActionCall, KeySpend, RunCharge

_KEYS = KeySpend.__table__  # type: ignore[attr-defined]
_RUNS = RunCharge.__table__  # type: ignore[attr-defined]


def _adds(insert: type[sqlite.Insert] | type[postgresql.Insert]) -> tuple[Insert, Insert]:
    """The two upserts in one dialect (INSERT ... ON CONFLICT DO UPDATE: SQLite and PostgreSQL alike)."""
    key = insert(_KEYS)
    run = insert(_RUNS)
    return (
        key.on_conflict_do_update(
            index_elements=[_KEYS.c.key_id, _KEYS.c.month],
            set_={"price": _KEYS.c.price + key.excluded.price, "total": _KEYS.c.total + key.excluded.total},
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


def add(session: Session, *, call: ActionCall, price: int, total: int, now: dt.datetime) -> None:
    """Add an ended call's charges to its key's month (`now`'s, when it ended) and its run, in the
    transaction that ended it."""
    if total <= 0:  # (a price is part of the total)
        return
    add_key, add_run = _ADDS[session.get_bind().dialect.name]
    params = {"key_id": call.key_id, "month": month_of(now), "org_id": call.org_id}
    rawsql.execute(session, add_key, {**params, "price": price, "total": total})
    if call.run_id is not None:
        rawsql.execute(session, add_run, {"run_id": call.run_id, "total": total})


def org_prices(session: Session, *, org_id: str, now: dt.datetime) -> int:
    """The publishers' prices an organization's calls that ended in `now`'s month were charged."""
    return int(rawsql.execute(session, _ORG_PRICES, {"org": org_id, "month": month_of(now)}).scalar() or 0)


def key_total(session: Session, *, key_id: str, now: dt.datetime) -> int:
    """What a key's calls that ended in `now`'s month were charged, in all."""
    return int(rawsql.execute(session, _KEY_TOTAL, {"key": key_id, "month": month_of(now)}).scalar() or 0)


def run_total_of(run_id: ColumnElement[str]) -> ScalarSelect[int]:
    """What the run `run_id` names has been charged for its ended calls, as a scalar subquery (NULL: nothing
    yet), for a statement that reads it with the run's running calls in one snapshot."""
    return sa_select(_RUNS.c.total).where(_RUNS.c.run_id == run_id).scalar_subquery()
