"""POST /v1/egress/relay: a js call's fetch under its grant; the grant alone decides hosts and credentials."""

from __future__ import annotations

import time
from typing import Any

from servers import InProcessProxy, Reply, Upstream

from egress.grants import Grant, GrantError, open_grant, sign_grant

TOKEN_SECRET = "ghp_relaySecret123"


def _grant(proxy: InProcessProxy, *, token: str | None = None, expires_in: float = 30, **kw: Any) -> str:
    bearer = proxy.seal(
        {"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": TOKEN_SECRET}
    )
    grant = Grant(
        call_id="call_1",
        pack="io.b3os/github",
        egress=kw.pop("egress", ["api.example.com"]),
        credentials=kw.pop("credentials", [bearer]),
        expires_at=time.time() + expires_in,
    )
    return sign_grant(token or proxy.token, grant)


async def _relay(proxy: InProcessProxy, **body: Any) -> tuple[int, dict[str, Any]]:
    body.setdefault("method", "GET")
    answer = await proxy.client.post("/v1/egress/relay", json=body)
    return answer.status_code, answer.json()


async def test_a_relayed_fetch_carries_the_grants_credential_to_its_host_only(
    proxy: InProcessProxy, api: Upstream, other: Upstream
) -> None:
    api.on("/v1/items", Reply(200, [("content-type", "application/json")], b'{"ok": true}'))
    other.on("/collect", Reply(200, [], b"thanks"))
    grant = _grant(proxy, egress=["api.example.com", "other.example.org"])
    status, answer = await _relay(proxy, grant=grant, url="https://api.example.com/v1/items")
    assert (status, answer["status"]) == (200, 200)
    assert api.requests[-1].header("authorization") == f"Bearer {TOKEN_SECRET}"
    status, answer = await _relay(
        proxy, grant=grant, url=f"https://other.example.org/collect?t={TOKEN_SECRET[:3]}"
    )
    assert (status, answer["status"]) == (200, 200)
    assert other.requests[-1].header("authorization") is None
    assert not other.received(TOKEN_SECRET.encode())


async def test_a_host_outside_the_grants_egress_is_refused_before_any_connection(
    proxy: InProcessProxy, other: Upstream
) -> None:
    status, answer = await _relay(proxy, grant=_grant(proxy), url="https://other.example.org/collect")
    assert status == 200
    assert answer["error"]["reason"] == "egress_refused"
    assert other.requests == []


async def test_loopback_and_metadata_addresses_are_refused(proxy: InProcessProxy) -> None:
    grant = _grant(proxy)
    for url in ("https://127.0.0.1/", "https://169.254.169.254/latest/meta-data/"):
        status, answer = await _relay(proxy, grant=grant, url=url)
        assert (status, answer["error"]["reason"]) == (200, "egress_refused"), url


async def test_a_grant_not_signed_with_the_proxys_token_or_expired_is_refused(
    proxy: InProcessProxy, api: Upstream
) -> None:
    for grant, why in (
        (_grant(proxy, token="another-token"), "the grant is not signed by this proxy's api"),
        (_grant(proxy, expires_in=-1), "the grant has expired: the call it was made for is over"),
        ("b3grant-v1.e30.AAAA", "the grant is not signed by this proxy's api"),
        ("Bearer x", "the grant is not a b3grant-v1 token"),
    ):
        status, answer = await _relay(proxy, grant=grant, url="https://api.example.com/v1/items")
        assert (status, answer) == (401, {"error": {"code": "unauthorized", "message": why}})
    assert api.requests == []


async def test_the_relay_cannot_widen_the_grant(proxy: InProcessProxy) -> None:
    status, answer = await _relay(
        proxy, grant=_grant(proxy), url="https://other.example.org/", egress=["other.example.org"]
    )
    assert status == 400
    assert answer["error"]["code"] == "invalid_request"
    assert answer["error"]["message"].startswith("egress: ")


def test_open_grant_checks_signature_and_expiry() -> None:
    grant = Grant(call_id="c", pack="io.b3os/x", egress=["a.example.com"], expires_at=time.time() + 5)
    text = sign_grant("t", grant)
    assert open_grant("t", text) == grant
    for token, now in (("u", None), ("t", time.time() + 10)):
        try:
            open_grant(token, text, now=now)
        except GrantError:
            continue
        raise AssertionError("accepted")
