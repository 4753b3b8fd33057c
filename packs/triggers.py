"""Typed models of a manifest's `triggers`: what a pack says starts a routine (docs/packs.md, "Triggers").

A trigger is a `webhook` (the other service sends each event to a URL b3os gives the subscription, and
signs it) or a `poll` (b3os asks the other service on a schedule, through the egress proxy, and keeps a
cursor). Either way it names the shape of its events (`eventSchema`) and, for each event, an id that
makes it run once. The publish checks (`packs.checks_triggers`) word every refusal of the raw dict;
these models give typed access once a manifest has passed them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

TRIGGER_KINDS = ("webhook", "poll")
VERIFY_KINDS = ("hmac-sha256",)
POLL_MIN_S = 60
POLL_MAX_S = 86_400
TOLERANCE_MAX_S = 3_600


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class WebhookTimestamp(_Model):
    """A header holding the delivery's time (Unix seconds): signed with the body, refused out of tolerance."""

    header: str
    tolerance_s: int = 300


class WebhookVerify(_Model):
    """How a delivery is verified: an HMAC-SHA256 of the body (`<timestamp>.<body>` with `timestamp`),
    keyed with the subscription's secret, in hex in `header` after `prefix`."""

    kind: Literal["hmac-sha256"]
    header: str
    prefix: str = ""
    timestamp: WebhookTimestamp | None = None


class Webhook(_Model):
    """A webhook trigger: its verification, the events of one delivery and each event's id (CEL)."""

    verify: WebhookVerify
    events: str | None = None
    id: str


class PollRequest(_Model):
    method: Literal["GET", "POST"] = "GET"
    url: str
    query: dict[str, Any] = {}
    headers: dict[str, str] = {}
    body: Any = None


class Poll(_Model):
    """A poll trigger: how often, the request (template), the items of an answer, each item's id, the
    next cursor and the event an item makes."""

    every_s: int = 300
    request: PollRequest
    items: str
    dedupe: str
    cursor: str | None = None
    event: Any = None

    @property
    def has_event(self) -> bool:
        """Whether the manifest maps an item to its event (else the event is the item)."""
        return "event" in self.model_fields_set


class Trigger(_Model):
    """One trigger of a pack."""

    key: str
    title: str
    description: str
    kind: Literal["webhook", "poll"]
    event_schema: dict[str, Any]
    input_schema: dict[str, Any] = {"type": "object", "additionalProperties": False}
    connections: list[str] = []
    webhook: Webhook | None = None
    poll: Poll | None = None
