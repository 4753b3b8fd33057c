"""A webhook delivery checked and read, by the trigger's manifest (pure: no I/O).

`check_signature` verifies the delivery's HMAC-SHA256 (docs/packs.md, "Triggers"): the header holds the
trigger's `prefix` and the lowercase hex HMAC of the raw body (of `<timestamp>.<body>` when the trigger
names a timestamp header, whose value must be within `toleranceS` of now). It returns why a delivery
is refused, or None; the comparison takes constant time. `read_events` parses the body, evaluates the
trigger's `events` and `id` and checks each event against its eventSchema.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine import expressions
from engine.expressions import ExpressionError
from packs.schemas import schema_errors
from packs.triggers import Webhook

MAX_EVENTS = 100
MAX_ID_CHARS = 200


@dataclass(frozen=True)
class ReadEvent:
    """One event of a delivery: its id and the event, or why it cannot run."""

    event_id: str | None
    event: dict[str, Any] | None
    refused: str | None = None


def check_signature(
    webhook: Webhook, secret: str, headers: Mapping[str, str], body: bytes, now_s: float
) -> str | None:
    """Why the delivery's signature does not hold, or None when it does.

    Args:
        headers: the request's headers by lowercase name.
    """
    verify = webhook.verify
    given = headers.get(verify.header.lower())
    if given is None:
        return f"the {verify.header} header is missing: the delivery is not signed"
    signed = body
    if verify.timestamp is not None:
        stamp = headers.get(verify.timestamp.header.lower())
        if stamp is None:
            return f"the {verify.timestamp.header} header is missing: the delivery's time is not signed"
        try:
            at = float(stamp.strip())
        except ValueError:
            return f"the {verify.timestamp.header} header is not a Unix time in seconds"
        if abs(now_s - at) > verify.timestamp.tolerance_s:
            return (
                f"the {verify.timestamp.header} time is {abs(now_s - at):.0f} s from now, more than the "
                f"{verify.timestamp.tolerance_s} s tolerated: an old delivery replayed, or a clock off"
            )
        signed = stamp.strip().encode() + b"." + body
    expected = verify.prefix + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.strip().encode()):
        return f"the {verify.header} signature does not match the body signed with this subscription's secret"
    return None


def read_events(
    webhook: Webhook, event_schema: dict[str, Any], headers: Mapping[str, str], body: bytes
) -> list[ReadEvent] | str:
    """The events of a verified delivery, or why none can be read (the body is not JSON, `events` failed)."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "the body is not JSON"
    scope = {"body": parsed, "headers": dict(headers)}
    if webhook.events is None:
        events: Any = [parsed]
    else:
        try:
            events = expressions.evaluate(webhook.events, scope)
        except ExpressionError as exc:
            return f"the trigger's events failed: {exc}"
    if not isinstance(events, list):
        return f"the trigger's events gave a {type(events).__name__}, not a list"
    found: list[ReadEvent] = []
    for event in events[:MAX_EVENTS]:
        found.append(_one(webhook, event_schema, scope, event))
    return found


def _one(webhook: Webhook, event_schema: dict[str, Any], scope: dict[str, Any], event: Any) -> ReadEvent:
    try:
        event_id = expressions.evaluate(webhook.id, {**scope, "event": event})
    except ExpressionError as exc:
        return ReadEvent(None, None, f"the trigger's id failed: {exc}")
    if event_id is None or isinstance(event_id, dict | list) or str(event_id) == "":
        return ReadEvent(None, None, "the trigger's id gave no id for the event")
    text = str(event_id)[:MAX_ID_CHARS]
    if not isinstance(event, dict):
        return ReadEvent(text, None, "the event is not an object")
    problems = [error.message for error in schema_errors(event_schema, event)]
    if problems:
        return ReadEvent(
            text, event, "the event does not match the trigger's eventSchema: " + "; ".join(problems[:3])
        )
    return ReadEvent(text, event)
