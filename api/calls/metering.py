"""Metering: a call's outcome, its charge and its units, recorded in one transaction.

Units, under the caller's key:

| unit | when | quantity |
|---|---|---|
| `actions.vcpu_ms` | the command ran | CPU milliseconds the node measured |
| `actions.gib_ms` | the command ran | GiB times milliseconds the node measured |
| `actions.tool_call` | the command ran | 1 (the per-call floor) |
| `actions.publisher_microusd` | the tool answered, its output matched its schema and | the price |
|   | its files were read | |
| `actions.call` | an HTTP action's request was sent to its upstream | 1 (the per-call floor) |

An HTTP action records `actions.call` and, on success, `actions.publisher_microusd`. A call that
failed before its command ran (or before its request was sent) records no unit. A tool call records
no `actions.call`. Which units a call records is its executor's word (`Execution.units`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, insert, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from api import rawsql
from api.calls import spend
from api.calls.costs import Cost
from api.calls.tables import DONE, RUNNING, ActionCall, MeterEvent

VCPU_MS = "actions.vcpu_ms"
GIB_MS = "actions.gib_ms"
TOOL_CALL = "actions.tool_call"
PUBLISHER_MICROUSD = "actions.publisher_microusd"
ACTION_CALL = "actions.call"
UNITS = (VCPU_MS, GIB_MS, TOOL_CALL, PUBLISHER_MICROUSD, ACTION_CALL)


@dataclass(frozen=True)
class Outcome:
    """How a call ended, as the api answers it."""

    status: int
    code: str | None
    reason: str | None
    ran: bool
    vcpu_ms: int
    gib_ms: int
    cost: Cost
    units: tuple[tuple[str, int], ...] = ()


_CALLS = ActionCall.__table__  # type: ignore[attr-defined]
_EVENTS = MeterEvent.__table__  # type: ignore[attr-defined]
# Built once, run on the session's connection by the driver (api.rawsql: no ORM, no SQLAlchemy
# execution, no statement built per call): these run for every call.
_FINISH = (
    update(_CALLS)
    .where(_CALLS.c.id == bindparam("b_id"), _CALLS.c.state == RUNNING)
    .values(
        state=DONE,
        **{name: bindparam(f"b_{name}") for name in ("finished_at", "status", "code", "reason", "ran")},
        **{
            name: bindparam(f"b_{name}")
            for name in ("vcpu_ms", "gib_ms", "compute", "floor", "price", "total")
        },
    )
)
_ADD_EVENTS = insert(_EVENTS)


def record(session: Session, *, call: ActionCall, outcome: Outcome, now: dt.datetime) -> None:
    """Finish a call's row (freeing its slots), add its charges to its key's and its run's sums
    (`api.calls.spend`) and its meter events, in the caller's transaction. A row a sweep has marked lost
    meanwhile (`limits.mark_lost`) stays as it is, and nothing is metered: a lost call is never billed,
    and its publisher is not paid for it."""
    cost = outcome.cost
    ended = rawsql.execute(
        session,
        _FINISH,
        {
            "b_id": call.id,
            "b_finished_at": now,
            "b_status": outcome.status,
            "b_code": outcome.code,
            "b_reason": outcome.reason,
            "b_ran": outcome.ran,
            "b_vcpu_ms": outcome.vcpu_ms,
            "b_gib_ms": outcome.gib_ms,
            "b_compute": cost.compute,
            "b_floor": cost.floor,
            "b_price": cost.price,
            "b_total": cost.total,
        },
    ).rowcount
    if not ended:  # its lease ended and a sweep marked it lost: it stays unbilled, its units unmetered
        return
    spend.add(session, call=call, price=cost.price, total=cost.total, now=now)
    namespace = call.pack.split("/", 1)[0]
    if outcome.units:  # one executemany
        rawsql.execute(
            session,
            _ADD_EVENTS,
            [
                {
                    "call_id": call.id,
                    "org_id": call.org_id,
                    "key_id": call.key_id,
                    "unit": unit,
                    "quantity": quantity,
                    "at": now,
                    "publisher": namespace,
                    "pack": call.pack,
                    "action": call.action,
                }
                for unit, quantity in outcome.units
            ],
        )


def usage(session: Session, *, org_id: str, start: dt.datetime, end: dt.datetime) -> dict[str, Any]:
    """An organization's own usage between two moments: units in all and per key, calls and their cost."""
    rows = session.exec(
        select(MeterEvent.key_id, MeterEvent.unit, func.sum(MeterEvent.quantity))
        .where(col(MeterEvent.org_id) == org_id, col(MeterEvent.at) >= start, col(MeterEvent.at) < end)
        .group_by(col(MeterEvent.key_id), col(MeterEvent.unit))
    ).all()
    units = dict.fromkeys(UNITS, 0)
    per_key: dict[str, dict[str, int]] = {}
    for key_id, unit, quantity in rows:
        units[unit] = units.get(unit, 0) + int(quantity)
        per_key.setdefault(key_id, dict.fromkeys(UNITS, 0))[unit] = int(quantity)
    cost_rows = session.execute(
        sa_select(
            col(ActionCall.key_id),
            func.count(),
            func.sum(col(ActionCall.compute)),
            func.sum(col(ActionCall.floor)),
            func.sum(col(ActionCall.price)),
            func.sum(col(ActionCall.total)),
        )
        .where(
            col(ActionCall.org_id) == org_id,
            col(ActionCall.state) == DONE,
            col(ActionCall.finished_at) >= start,
            col(ActionCall.finished_at) < end,
        )
        .group_by(col(ActionCall.key_id))
    ).all()
    keys = []
    totals = dict.fromkeys(("calls", "compute", "floor", "price", "total"), 0)
    for key_id, calls, compute, floor, price, total in cost_rows:
        cost = {
            "compute": int(compute or 0),
            "floor": int(floor or 0),
            "price": int(price or 0),
            "total": int(total or 0),
        }
        keys.append(
            {
                "key_id": key_id,
                "calls": int(calls),
                "units": per_key.pop(key_id, dict.fromkeys(UNITS, 0)),
                "cost": cost,
            }
        )
        totals["calls"] += int(calls)
        for name, value in cost.items():
            totals[name] += value
    keys.sort(key=lambda k: k["key_id"])
    return {
        "calls": totals["calls"],
        "units": units,
        "cost": {k: totals[k] for k in ("compute", "floor", "price", "total")},
        "keys": keys,
    }
