"""The tables of action calls: calls (with their leases), meter events and idempotency records.

- `action_calls`: one row per admitted call, of every action kind (`tool_calls` before revision
  0006). While `state` is `running` the row is the call's lease: it holds one of its organization's 4
  and its node's 8 slots until `lease_expires_at`, so a call whose api process died frees its slots
  by itself. `started_at` counts toward the 120 starts a
  minute. The finished row keeps the outcome and the cost in micro-USD (never a customer's input);
  a row whose lease ended while `running` is marked `lost` (its api process died; never billed).
- `meter_events`: the metered units of a call, under the caller's key (`actions.vcpu_ms`,
  `actions.gib_ms`, `actions.tool_call`, `actions.publisher_microusd`), with the tool's publisher
  namespace for the earnings report.
- `idempotency_records`: one row per (organization, Idempotency-Key), claimed with an INSERT;
  it stores the answer (status and body) for at least 24 hours. `call_id` names the call as soon
  as it is admitted, so a cancel by key finds the running call.
- `call_cancels`: one row per call cancelled while it ran (`POST /v1/actions/call/cancel`).
- `key_spend` and `run_charges`: what ended calls were charged, added up as each call ends
  (`api.calls.spend`): per key and month (the month the call ended in, UTC), and per run.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow

RUNNING = "running"
DONE = "done"
LOST = "lost"


class ActionCall(SQLModel, table=True):
    """An admitted action call (a hosted tool's or an HTTP action's): its lease while it runs, then its
    outcome and cost."""

    __tablename__ = "action_calls"
    __table_args__ = (
        # the running calls (few), of an organization or a node: admission, the sweep of ended leases
        Index("ix_action_calls_state_lease", "state", "lease_expires_at"),
        # an organization's starts in the last minute (admission)
        Index("ix_action_calls_org_started", "org_id", "started_at"),
        # a run's running calls (its max cost)
        Index("ix_action_calls_run_state", "run_id", "state"),
        # a refusal's Retry-After: an action version's last finished calls (api.calls.slot_ends)
        Index("ix_action_calls_action_finished", "pack", "version", "action", "state", "finished_at"),
    )
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(max_length=40)
    key_id: str = Field(max_length=40)
    surface: str = Field(max_length=20, description="http, mcp or routine")
    pack: str = Field(max_length=300)
    version: str = Field(max_length=100)
    action: str = Field(max_length=200)
    node_id: str = Field(max_length=100)
    state: str = Field(default=RUNNING, max_length=20)
    timeout_ms: int
    price_microusd: int = Field(default=0, sa_type=BigInteger, description="the publisher's price, reserved")
    started_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    deadline_at: dt.datetime = Field(sa_type=UTCDateTime, description="when the call must have ended")
    lease_expires_at: dt.datetime = Field(sa_type=UTCDateTime, description="slots are free after this")
    finished_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)
    status: int | None = None
    code: str | None = Field(default=None, max_length=60)
    reason: str | None = Field(default=None, max_length=60)
    ran: bool = False
    vcpu_ms: int = Field(default=0, sa_type=BigInteger)
    gib_ms: int = Field(default=0, sa_type=BigInteger)
    compute: int = Field(default=0, sa_type=BigInteger)
    floor: int = Field(default=0, sa_type=BigInteger)
    price: int = Field(default=0, sa_type=BigInteger)
    total: int = Field(default=0, sa_type=BigInteger)
    run_id: str | None = Field(default=None, max_length=40, description="the run of a routine step's call")
    ceiling_microusd: int | None = Field(
        default=None,
        sa_type=BigInteger,
        description="the most the call can cost, held against its run's max_cost_microusd while it runs",
    )


class MeterEvent(SQLModel, table=True):
    """A quantity of one unit metered for one call under the caller's key."""

    __tablename__ = "meter_events"
    __table_args__ = (Index("ix_meter_events_publisher_unit_at", "publisher", "unit", "at"),)
    id: int | None = Field(default=None, primary_key=True)
    call_id: str = Field(max_length=40, index=True)
    org_id: str = Field(max_length=40)
    key_id: str = Field(max_length=40)
    unit: str = Field(max_length=60)
    quantity: int = Field(sa_type=BigInteger)
    at: dt.datetime = Field(sa_type=UTCDateTime)
    publisher: str = Field(max_length=200, description="the namespace of the tool's pack")
    pack: str = Field(max_length=300)
    action: str = Field(max_length=200)


class IdempotencyRecord(SQLModel, table=True):
    """The claim of an Idempotency-Key, then the answer it stores."""

    __tablename__ = "idempotency_records"
    org_id: str = Field(primary_key=True, max_length=40)
    key: str = Field(primary_key=True, max_length=255)
    request_hash: str = Field(max_length=80)
    state: str = Field(default=RUNNING, max_length=20)
    claimed_until: dt.datetime = Field(sa_type=UTCDateTime)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    expires_at: dt.datetime = Field(sa_type=UTCDateTime, index=True)
    call_id: str | None = Field(default=None, max_length=40)
    status: int | None = None
    body: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class CallCancel(SQLModel, table=True):
    """A cancel asked for a running call (the call's own row keeps its real outcome and cost)."""

    __tablename__ = "call_cancels"

    call_id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(max_length=40)
    key_id: str = Field(max_length=40, description="the key that asked for the cancel")
    requested_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    node_state: str = Field(max_length=20, description="killed, not_started, unknown or unreachable")


class KeySpend(SQLModel, table=True):
    """What a key's calls that ended in one month were charged and metered (their rows' and their meter
    events' sums): the month's limits (`api.calls.limits`) and `GET /v1/usage` read it."""

    __tablename__ = "key_spend"
    __table_args__ = (Index("ix_key_spend_org_month", "org_id", "month"),)
    key_id: str = Field(primary_key=True, max_length=40)
    month: str = Field(primary_key=True, max_length=7, description="YYYY-MM, UTC")
    org_id: str = Field(max_length=40)
    price: int = Field(default=0, sa_type=BigInteger, description="publishers' prices, micro-USD")
    total: int = Field(default=0, sa_type=BigInteger, description="every charge, micro-USD")
    calls: int = Field(default=0, sa_type=BigInteger, description="calls that ended done")
    compute: int = Field(default=0, sa_type=BigInteger, description="their compute charges, micro-USD")
    floor: int = Field(default=0, sa_type=BigInteger, description="their floors, micro-USD")
    vcpu_ms: int = Field(default=0, sa_type=BigInteger, description="unit actions.vcpu_ms")
    gib_ms: int = Field(default=0, sa_type=BigInteger, description="unit actions.gib_ms")
    tool_calls: int = Field(default=0, sa_type=BigInteger, description="unit actions.tool_call")
    publisher_microusd: int = Field(
        default=0, sa_type=BigInteger, description="unit actions.publisher_microusd"
    )
    action_calls: int = Field(default=0, sa_type=BigInteger, description="unit actions.call")


class RunCharge(SQLModel, table=True):
    """What a run's ended calls were charged, in all (the sum of their rows' `total`)."""

    __tablename__ = "run_charges"
    run_id: str = Field(primary_key=True, max_length=40)
    total: int = Field(default=0, sa_type=BigInteger)
