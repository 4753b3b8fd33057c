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

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session

from api import rawsql
from api.calls import spend
from api.calls.costs import Cost
from api.calls.tables import DONE, RUNNING, ActionCall, MeterEvent
from api.rawsql import Transaction

VCPU_MS = "actions.vcpu_ms"
GIB_MS = "actions.gib_ms"
TOOL_CALL = "actions.tool_call"
PUBLISHER_MICROUSD = "actions.publisher_microusd"
ACTION_CALL = "actions.call"
UNITS = (VCPU_MS, GIB_MS, TOOL_CALL, PUBLISHER_MICROUSD, ACTION_CALL)
_SUM_OF = {
    VCPU_MS: "vcpu_ms",
    GIB_MS: "gib_ms",
    TOOL_CALL: "tool_calls",
    PUBLISHER_MICROUSD: "publisher_microusd",
    ACTION_CALL: "action_calls",
}
"""Each unit's sum in a key's month (`api.calls.spend.SUMS`)."""
_CHARGES = ("compute", "floor", "price", "total")


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


def record(session: Transaction, *, call: ActionCall, outcome: Outcome, now: dt.datetime) -> None:
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
    sums = {name: getattr(cost, name) for name in _CHARGES}
    for unit, quantity in outcome.units:  # (a unit may come more than once)
        sums[_SUM_OF[unit]] = sums.get(_SUM_OF[unit], 0) + quantity
    spend.add(session, call=call, sums=sums, now=now)
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


def usage(session: Session, *, org_id: str, month: str) -> dict[str, Any]:
    """An organization's own usage in a month (`YYYY-MM`, UTC): the calls that ended in it, their cost and
    units, in all and per key (`api.calls.spend`'s sums)."""
    rows = spend.of_month(session, org_id=org_id, month=month)
    return {
        "calls": sum(r.calls for r in rows),
        "units": {unit: sum(getattr(r, column) for r in rows) for unit, column in _SUM_OF.items()},
        "cost": {name: sum(getattr(r, name) for r in rows) for name in _CHARGES},
        "keys": [
            {
                "key_id": r.key_id,
                "calls": r.calls,
                "units": {unit: getattr(r, column) for unit, column in _SUM_OF.items()},
                "cost": {name: getattr(r, name) for name in _CHARGES},
            }
            for r in rows
        ],
    }
