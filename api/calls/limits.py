"""Admission of a call: the limits checked and the call's lease taken in one database transaction.

Per organization: 4 tool calls at once and, counted apart, 8 HTTP action calls at once (their lane,
`http`, holds no node); 120 starts in any 60 s of every kind together, past `routine_burst` (20) of
them a routine step's call at least 0.5 s (60 s / 120) after the organization's latest start (its
minute's starts spread, not taken in a few seconds that slow every other organization's runs on a
shared control plane), 20 USD a month of publishers' prices (priced calls only), and each key's own
monthly spend cap. Per node: 8 calls at once, the call going to the least loaded node that has the
version. The checks and the INSERT of the call's row happen in one transaction under a lock, so
several api processes sharing one database never over-admit: SQLite transactions all begin with
`BEGIN IMMEDIATE` (one writer at a time), and on PostgreSQL the transaction takes advisory locks on the
organization and then on the candidate nodes, in that order, so two admissions never wait on each other
in a cycle.

A running row is a lease: it holds its slots until `lease_expires_at` (the call's deadline plus a
grace period), so a call whose api process died frees them by itself.

Retry-After is computed from the state that refused the call:
- concurrency_limited and node_busy: when the soonest running call is expected to end
  (`api.calls.slot_ends`);
- rate_limited: when the oldest start of the 60 s window leaves it; a routine step's call held back by
  the spread: 0.5 s after the latest start;
- quota_exceeded: when the month ends (UTC), or, when only running calls' reservations tip the
  balance, when the soonest of them must have ended.

A routine step's call's row names its run and its ceiling (the most it can cost), which
`api.calls.run_cost` holds against the run's max_cost_microusd in the same transaction (`admit`'s `also`).
"""

from __future__ import annotations

import datetime as dt
import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Integer, Select, bindparam, func, insert, or_, text, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from api import rawsql
from api.calls import spend
from api.calls.earnings import add_months
from api.calls.errors import ConcurrencyLimited, QuotaExceeded, ToolUnavailable
from api.calls.executor import HTTP_LANE
from api.calls.settings import CallSettings
from api.calls.slot_ends import expected_end, soonest_end
from api.calls.tables import LOST, RUNNING, ActionCall
from api.errors import RateLimited
from api.rawsql import Transaction

WINDOW = dt.timedelta(seconds=60)


class Candidate(Protocol):
    """A node a call may go to (`api.nodes.LiveNode`)."""

    @property
    def node_id(self) -> str: ...
    @property
    def slots_total(self) -> int: ...
    @property
    def slots_free(self) -> int: ...


_CALLS = ActionCall.__table__  # type: ignore[attr-defined]
# Built once and run on the session's connection by the driver (api.rawsql): every call's admission
# runs them.
_ADD_CALL = insert(_CALLS)


@functools.cache  # one per count of candidate nodes
def _load_of(nodes: int) -> Select[Any]:
    """The running calls of an organization or of `nodes` candidate nodes (`node_0`...), per node and
    organization: one statement per count of candidates, each built once."""
    on_nodes = [_CALLS.c.node_id == bindparam(f"node_{i}") for i in range(nodes)]
    return (
        sa_select(_CALLS.c.node_id, _CALLS.c.org_id, func.count())
        .where(
            _CALLS.c.state == RUNNING,
            _CALLS.c.lease_expires_at > bindparam("now"),
            or_(_CALLS.c.org_id == bindparam("org"), *on_nodes),
        )
        .group_by(_CALLS.c.node_id, _CALLS.c.org_id)
    )


_STARTS = sa_select(func.count(), func.max(_CALLS.c.started_at)).where(
    _CALLS.c.org_id == bindparam("org"), _CALLS.c.started_at > bindparam("since")
)
# the nth oldest start of the window, for a refusal's Retry-After
_NTH_START = (
    sa_select(_CALLS.c.started_at)
    .where(_CALLS.c.org_id == bindparam("org"), _CALLS.c.started_at > bindparam("since"))
    .order_by(_CALLS.c.started_at)
    .offset(bindparam("skip", type_=Integer))
    .limit(1)
)
_RUNNING = sa_select(_CALLS).where(_CALLS.c.state == RUNNING, _CALLS.c.lease_expires_at > bindparam("now"))
_RUNNING_OF_ORG = _RUNNING.where(_CALLS.c.org_id == bindparam("org"))


@functools.cache  # one per count of nodes
def _running_on(nodes: int) -> Select[Any]:
    return _RUNNING.where(or_(*(_CALLS.c.node_id == bindparam(f"node_{i}") for i in range(nodes))))


_ADVISORY_LOCK = text("SELECT pg_advisory_xact_lock(:k)")


@dataclass(frozen=True)
class Admission:
    """What the api knows about a call before it is admitted."""

    call_id: str
    org_id: str
    key_id: str
    spend_cap_microusd: int | None
    surface: str
    pack: str
    version: str
    action: str
    price: int
    timeout_ms: int
    lane: str | None = None  # None: a tool call placed on a node; else the lane its row holds (`http`)
    run_id: str | None = None  # a routine step's call: its run
    ceiling: int | None = None  # the most this call can cost (set for a routine step's call)

    def floor_microusd(self, settings: CallSettings) -> int:
        """The per-call floor this call is charged once it runs."""
        prices = settings.unit_prices()
        return prices.tool_call_microusd if self.lane is None else prices.action_call_microusd


def month_start(now: dt.datetime) -> dt.datetime:
    """The first moment of `now`'s month, UTC."""
    return now.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _lock(session: Transaction, names: Sequence[str]) -> None:
    if session.get_bind().dialect.name != "postgresql":
        return  # SQLite: the transaction already holds the database's write lock (BEGIN IMMEDIATE)
    for name in names:
        rawsql.execute(session, _ADVISORY_LOCK, {"k": zlib.crc32(name.encode()) - 2**31})


def _running(
    session: Transaction, now: dt.datetime, *, org_id: str | None = None, node_ids: Sequence[str] = ()
) -> list[ActionCall]:
    """The running calls of an organization, or on some nodes (read-only rows, as `admit` returns)."""
    if org_id is not None:
        rows = rawsql.execute(session, _RUNNING_OF_ORG, {"now": now, "org": org_id}).rows
    else:
        params = {"now": now, **{f"node_{i}": node_id for i, node_id in enumerate(node_ids)}}
        rows = rawsql.execute(session, _running_on(len(node_ids)), params).rows
    return [ActionCall.model_construct(**row._asdict()) for row in rows]


def _in_lane(adm: Admission, node_id: str) -> bool:
    """Whether a running call on `node_id` (a node, or a lane's name) holds the same lane as `adm`."""
    return node_id == adm.lane if adm.lane is not None else node_id != HTTP_LANE


def _load(
    session: Transaction, adm: Admission, nodes: Sequence[Candidate], now: dt.datetime
) -> tuple[int, dict[str, int]]:
    """In one statement: how many running calls hold the call's lane of its organization, and each
    candidate node's running calls (no rows loaded: a refusal reads them again for its Retry-After)."""
    node_ids = [n.node_id for n in nodes]
    params = {"now": now, "org": adm.org_id, **{f"node_{i}": node_id for i, node_id in enumerate(node_ids)}}
    rows = rawsql.execute(session, _load_of(len(node_ids)), params).rows
    lane = 0
    per_node = dict.fromkeys(node_ids, 0)
    for node_id, org_id, count in rows:
        if org_id == adm.org_id and _in_lane(adm, node_id):
            lane += count
        if node_id in per_node:
            per_node[node_id] += count
    return lane, per_node


def _check_org(
    session: Transaction, adm: Admission, settings: CallSettings, now: dt.datetime, lane_count: int
) -> None:
    if adm.lane is None:
        limit, what = settings.calls_per_org, "calls"
    else:
        limit, what = settings.http_calls_per_org, "HTTP action calls"
    if lane_count >= limit:
        running = _running(session, now, org_id=adm.org_id)
        lane = [c for c in running if _in_lane(adm, c.node_id)]
        raise ConcurrencyLimited(
            f"this organization already runs {len(lane)} {what} at once, the most it may",
            retry_after=expected_end(session, lane, now),
            details={"limit": limit},
        )
    starts, latest = rawsql.execute(session, _STARTS, {"org": adm.org_id, "since": now - WINDOW}).first()
    if starts >= settings.starts_per_minute:
        skip = starts - settings.starts_per_minute
        oldest_counted = rawsql.execute(
            session, _NTH_START, {"org": adm.org_id, "since": now - WINDOW, "skip": skip}
        ).scalar()
        raise RateLimited(
            f"this organization started {starts} calls in the last 60 seconds, the most it may",
            retry_after=(oldest_counted + WINDOW - now).total_seconds(),
            details={"limit": settings.starts_per_minute},
        )
    if adm.surface == "routine" and starts >= settings.routine_burst:
        spaced = WINDOW / settings.starts_per_minute
        if now < latest + spaced:
            raise RateLimited(
                f"this organization started {starts} calls in the last 60 seconds: its routine steps' calls "
                f"now start one every {spaced.total_seconds():g} seconds",
                retry_after=(latest + spaced - now).total_seconds(),
                details={"limit": settings.starts_per_minute},
            )
    if adm.price <= 0 and adm.spend_cap_microusd is None:
        return
    running = _running(session, now, org_id=adm.org_id)
    month_end = add_months(month_start(now), 1)
    to_month_end = (month_end - now).total_seconds()
    if adm.price > 0:
        spent = spend.org_prices(session, org_id=adm.org_id, now=now)
        held = [c for c in running if c.price_microusd > 0]
        reserved = sum(c.price_microusd for c in held)
        quota = settings.org_publisher_quota_microusd
        if spent + reserved + adm.price > quota:
            raise QuotaExceeded(
                f"this call's price of {adm.price} micro-USD would take this organization's publishers' "
                f"prices this month past {quota} micro-USD ({spent} spent, {reserved} held by running calls)",
                retry_after=to_month_end if spent + adm.price > quota else soonest_end(held, now),
                details={"limit": "publisher_prices", "quota_microusd": quota, "spent_microusd": spent},
            )
    if adm.spend_cap_microusd is not None:
        cap = adm.spend_cap_microusd
        prices = settings.unit_prices()
        need = adm.price + adm.floor_microusd(settings)
        spent = spend.key_total(session, key_id=adm.key_id, now=now)
        held = [c for c in running if c.key_id == adm.key_id]
        reserved = sum(
            c.price_microusd
            + (prices.action_call_microusd if c.node_id == HTTP_LANE else prices.tool_call_microusd)
            for c in held
        )
        if spent + reserved + need > cap:
            raise QuotaExceeded(
                f"this call (at least {need} micro-USD) would take this key past its monthly spend cap of "
                f"{cap} micro-USD ({spent} spent this month, {reserved} held by running calls)",
                retry_after=to_month_end if spent + need > cap else soonest_end(held, now),
                details={"limit": "key_spend_cap", "cap_microusd": cap, "spent_microusd": spent},
            )


def _pick_node(
    session: Transaction,
    nodes: Sequence[Candidate],
    per_node: dict[str, int],
    settings: CallSettings,
    now: dt.datetime,
) -> Candidate:
    loads: list[tuple[int, int, str, Candidate]] = []
    for node in nodes:
        capacity = min(settings.calls_per_node, node.slots_total or settings.calls_per_node)
        if per_node[node.node_id] < capacity:  # (a node's own count of free slots counts up to its capacity)
            loads.append((per_node[node.node_id], -min(node.slots_free, capacity), node.node_id, node))
    if not loads:
        busy = _running(session, now, node_ids=[n.node_id for n in nodes])
        raise ToolUnavailable(
            "every node that has this tool already runs as many calls as it may; nothing was billed",
            reason="node_busy",
            retry_after=expected_end(session, busy, now),
        )
    return min(loads, key=lambda item: item[:3])[3]


def refusal(
    session: Transaction,
    *,
    adm: Admission,
    nodes: Sequence[Candidate],
    settings: CallSettings,
    now: dt.datetime,
) -> None:
    """Raise what `admit` would refuse now, read without taking the write lock (nothing is written).

    A call waiting for a slot asks this before each new try of `admit`: while its organization or the
    nodes stay full, a try costs a read, not a turn of the database's one writer that every other
    organization's starts and calls wait for.

    Raises:
        ConcurrencyLimited, RateLimited, QuotaExceeded, ToolUnavailable: as `admit` would.
    """
    lane_count, per_node = _load(session, adm, nodes if adm.lane is None else (), now)
    _check_org(session, adm, settings, now, lane_count)
    if adm.lane is None:
        _pick_node(session, nodes, per_node, settings, now)


def admit(
    session: Transaction,
    *,
    adm: Admission,
    nodes: Sequence[Candidate],
    settings: CallSettings,
    clock: Callable[[], dt.datetime],
    also: Callable[[Transaction], None] | None = None,
) -> ActionCall:
    """Check every limit and take the call's lease on the least loaded node, in one transaction.

    `also` adds its writes to that transaction (the service links the call to its Idempotency-Key's
    claim): one write transaction, not two, on a call's path. The call's `started_at` is read from
    `clock` once the transaction has counted the running calls, so it is never earlier than the
    `finished_at` of a call whose slot it took (a time read before the count could be: a call's end is
    written without the node's lock, so it may commit after this transaction took its locks).

    Returns:
        The call's row (committed), holding its slots: read-only (not in any session; setting a field
        raises AttributeError).

    Raises:
        ConcurrencyLimited, RateLimited, QuotaExceeded: 429, with Retry-After.
        ToolUnavailable: 503 node_busy when every candidate node is full.
    """
    try:
        _lock(session, [f"org:{adm.org_id}", *sorted(f"node:{n.node_id}" for n in nodes)])
        session.connection()  # SQLite: BEGIN IMMEDIATE (the write lock) now, not at the first statement
        now = clock()
        lane_count, per_node = _load(session, adm, nodes if adm.lane is None else (), now)
        _check_org(session, adm, settings, now, lane_count)
        if adm.lane is not None:
            node_id = adm.lane
        else:
            node_id = _pick_node(session, nodes, per_node, settings, now).node_id
        now = clock()  # read again after the count: never earlier than a counted call's finished_at
        deadline = now + dt.timedelta(milliseconds=adm.timeout_ms, seconds=settings.call_overhead_s)
        # built without validation or the ORM's instance state (every field is the api's own, typed): a
        # read-only record of the row inserted below, never added to a session (`ActionCall(...)` cost
        # 70 us a call, this 10)
        call = ActionCall.model_construct(
            id=adm.call_id,
            org_id=adm.org_id,
            key_id=adm.key_id,
            surface=adm.surface,
            pack=adm.pack,
            version=adm.version,
            action=adm.action,
            node_id=node_id,
            timeout_ms=adm.timeout_ms,
            price_microusd=adm.price,
            run_id=adm.run_id,
            ceiling_microusd=adm.ceiling,
            started_at=now,
            deadline_at=deadline,
            lease_expires_at=deadline + dt.timedelta(seconds=settings.lease_grace_s),
        )
        # an INSERT on the driver, no ORM: this runs for every call (the row is returned as built)
        rawsql.execute(session, _ADD_CALL, call.model_dump())
        if also is not None:
            also(session)
        session.commit()
        return call
    except BaseException:
        session.rollback()
        raise


def mark_lost(session: Session, *, now: dt.datetime) -> int:
    """Mark running rows whose lease ended (their api process died) as `lost`; commits; returns how many.

    A lost call is never billed: its api process died before it heard the node's answer.
    """
    result = session.execute(
        update(ActionCall)
        .where(col(ActionCall.state) == RUNNING, col(ActionCall.lease_expires_at) <= now)
        .values(state=LOST, finished_at=now)
    )
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]
