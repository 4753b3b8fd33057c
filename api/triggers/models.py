"""Answer bodies of the triggers API."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field

DeliveryStatus = Literal["refused", "duplicate", "ignored", "pending", "started", "failed"]


class SubscriptionPublic(BaseModel):
    """A routine's subscription to a pack's trigger."""

    id: str = Field(description="unguessable: a webhook subscription's address is /v1/hooks/{id}")
    routine: str
    trigger: str = Field(
        description="the trigger ref as the routine writes it", examples=["io.b3os/github/issue-opened@1"]
    )
    pin: str = Field(description="the exact version it resolved to when the routine was stored")
    kind: Literal["webhook", "poll"]
    with_: dict[str, Any] = Field(alias="with", description="the trigger's input")
    connection: str | None = None
    inputs: dict[str, Any] = Field(description="the inputs of each run it starts")
    hook_url: str | None = Field(
        default=None, description="a webhook's address: where the other service posts"
    )
    webhook_secret: str | None = Field(
        default=None,
        description="a webhook's signing secret, for the other service's settings (shown to keys with "
        "routines:run only)",
    )
    created_at: dt.datetime
    ended_at: dt.datetime | None = Field(default=None, description="when the routine stopped subscribing")


class SubscriptionList(BaseModel):
    subscriptions: list[SubscriptionPublic]


class DeliveryPublic(BaseModel):
    """One delivery (or one event of a delivery, or one polled item) and what became of it."""

    id: str
    subscription_id: str
    received_at: dt.datetime
    verified: bool = Field(description="its signature was verified")
    status: DeliveryStatus = Field(
        description="refused (see reason), duplicate (its event ran before), ignored (no event in it), "
        "pending (stored, its run not started yet), started (run_id) or failed (refused for good: last_error)"
    )
    reason: str | None = Field(default=None, description="why it was refused or ignored")
    event_id: str | None = None
    run_id: str | None = None
    attempts: int = Field(description="starts of its run tried")
    last_error: str | None = Field(default=None, description="why the last start did not start the run")


class DeliveryList(BaseModel):
    deliveries: list[DeliveryPublic]


class DeliveryAccepted(BaseModel):
    """A delivery stored: each of its events runs once."""

    deliveries: list[DeliveryPublic]


class ReplayCreate(BaseModel):
    """Which delivery to start again."""

    delivery_id: str = Field(max_length=40)
