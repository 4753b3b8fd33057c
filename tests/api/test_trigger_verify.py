"""A webhook delivery's signature and events, read by the trigger's manifest (api.triggers.verify): the
GitHub scheme, a Stripe-like signed timestamp whose tolerance refuses a replay, events and ids."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from api.triggers.secrets import subscription_secret
from api.triggers.verify import ReadEvent, check_signature, read_events
from packs.triggers import Webhook

GITHUB = Webhook.model_validate(
    {
        "verify": {"kind": "hmac-sha256", "header": "X-Hub-Signature-256", "prefix": "sha256="},
        "events": "${{ body.action == 'opened' ? [{'n': body.n}] : [] }}",
        "id": "${{ headers['x-github-delivery'] }}",
    }
)
STAMPED = Webhook.model_validate(
    {
        "verify": {
            "kind": "hmac-sha256",
            "header": "X-Signature",
            "timestamp": {"header": "X-Timestamp", "toleranceS": 300},
        },
        "id": "${{ event.id }}",
    }
)
SECRET = "b3whs_test"
BODY = b'{"action": "opened", "n": 7}'
NOW = 1_800_000_000.0


def hexmac(data: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def test_a_github_signature_holds_and_any_change_breaks_it() -> None:
    headers = {"x-hub-signature-256": "sha256=" + hexmac(BODY)}
    assert check_signature(GITHUB, SECRET, headers, BODY, NOW) is None
    assert check_signature(GITHUB, SECRET, headers, BODY + b" ", NOW) == (
        "the X-Hub-Signature-256 signature does not match the body signed with this subscription's secret"
    )
    assert check_signature(GITHUB, "b3whs_other", headers, BODY, NOW) is not None
    assert (
        check_signature(GITHUB, SECRET, {"x-hub-signature-256": hexmac(BODY)}, BODY, NOW) is not None
    )  # no prefix
    assert check_signature(GITHUB, SECRET, {}, BODY, NOW) == (
        "the X-Hub-Signature-256 header is missing: the delivery is not signed"
    )


@pytest.mark.parametrize(
    ("age_s", "holds"), [(0, True), (299, True), (-299, True), (301, False), (-301, False)]
)
def test_a_signed_timestamp_outside_the_tolerance_is_refused_as_a_replay(age_s: int, holds: bool) -> None:
    stamp = str(int(NOW - age_s))
    headers = {"x-timestamp": stamp, "x-signature": hexmac(stamp.encode() + b"." + BODY)}
    found = check_signature(STAMPED, SECRET, headers, BODY, NOW)
    assert (found is None) is holds, found
    if not holds:
        assert found is not None and "more than the 300 s tolerated" in found


def test_a_timestamp_changed_after_signing_breaks_the_signature() -> None:
    stamp = str(int(NOW))
    headers = {"x-timestamp": str(int(NOW) - 1), "x-signature": hexmac(stamp.encode() + b"." + BODY)}
    assert check_signature(STAMPED, SECRET, headers, BODY, NOW) is not None


def events(headers: dict[str, str], body: bytes) -> list[ReadEvent]:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    found = read_events(GITHUB, schema, headers, body)
    assert isinstance(found, list), found
    return found


def test_events_and_their_ids_are_read_and_checked_against_the_event_schema() -> None:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    (read,) = events({"x-github-delivery": "d-1"}, BODY)
    assert (read.event_id, read.event, read.refused) == ("d-1", {"n": 7}, None)
    assert read_events(GITHUB, schema, {"x-github-delivery": "d-2"}, b'{"action": "closed"}') == []
    assert read_events(GITHUB, schema, {}, b"not json") == "the body is not JSON"
    (bad,) = events({"x-github-delivery": "d-3"}, b'{"action": "opened", "n": "x"}')
    assert bad.refused is not None and bad.refused.startswith(
        "the event does not match the trigger's eventSchema"
    )
    (no_id,) = events({}, BODY)
    assert no_id.refused is not None and no_id.event_id is None


def test_each_subscription_has_its_own_secret_from_the_hooks_key() -> None:
    a, b = subscription_secret(b"k" * 32, "trg_a"), subscription_secret(b"k" * 32, "trg_b")
    assert a.startswith("b3whs_") and a != b and a == subscription_secret(b"k" * 32, "trg_a")
    assert a != subscription_secret(b"j" * 32, "trg_a")
    assert json.dumps(a).isascii()
