"""The tables of triggers.

- `trigger_subscriptions`: a routine's subscription to a pack's trigger (api.triggers.subscriptions): the
  trigger ref and the exact version it resolved to when the routine was stored, its kind, its `with:`,
  `connection:` and `inputs:`, the key its runs are started for, a poll's cursor, and when it ended (a
  routine stored again without it). Its id is unguessable: it is the webhook's address.
- `trigger_deliveries`: each delivery or event received (api.triggers.deliveries): refused with its
  reason, a duplicate of an event seen before, pending (stored, its run not yet started), started (with
  the run's id) or ignored (a delivery with no event). `dedupe` is the event id of the one delivery that
  runs it: unique within the subscription, so an event runs once whatever the redeliveries.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow


class TriggerSubscription(SQLModel, table=True):
    """A routine's subscription to one trigger of a pack."""

    __tablename__ = "trigger_subscriptions"
    __table_args__ = (Index("ix_trigger_subscriptions_org_routine", "org_id", "routine_name"),)
    id: str = Field(primary_key=True, max_length=64)
    org_id: str = Field(max_length=40)
    routine_name: str = Field(max_length=63)
    key_id: str = Field(max_length=40, description="the API key its runs are started for")
    position: int = Field(description="its index in the routine's on: list")
    trigger: str = Field(max_length=300, description="the ref as the routine writes it")
    pin: str = Field(max_length=300, description="the exact version it resolved to when stored")
    kind: str = Field(max_length=10, description="webhook or poll")
    with_input: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False), description="its with:")
    connection: str | None = Field(default=None, max_length=64)
    inputs: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    cursor: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    polled_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, description="its last poll")
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    ended_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)


class TriggerDelivery(SQLModel, table=True):
    """One delivery (one event of a delivery, or one polled item) of a subscription, and what became of it."""

    __tablename__ = "trigger_deliveries"
    __table_args__ = (
        Index("ix_trigger_deliveries_subscription_received", "subscription_id", "received_at"),
        Index("ix_trigger_deliveries_subscription_dedupe", "subscription_id", "dedupe", unique=True),
        Index("ix_trigger_deliveries_status", "status"),
    )
    id: str = Field(primary_key=True, max_length=40)
    subscription_id: str = Field(max_length=64)
    org_id: str = Field(max_length=40)
    received_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    verified: bool = False
    status: str = Field(max_length=12, description="refused, duplicate, ignored, pending or started")
    reason: str | None = Field(default=None, max_length=1000)
    event_id: str | None = Field(default=None, max_length=200)
    dedupe: str | None = Field(
        default=None, max_length=200, description="event_id of the delivery that runs it"
    )
    event: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    run_id: str | None = Field(default=None, max_length=40)
    attempts: int = 0
    last_error: str | None = Field(default=None, max_length=1000)
