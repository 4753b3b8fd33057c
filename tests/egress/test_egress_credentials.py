"""Credential injection: where each kind goes, only to its hosts, never echoed, never overridable."""

from __future__ import annotations

import json
from typing import Any

import pytest
from servers import InProcessProxy, Reply, Upstream, basic_value

EGRESS = ["api.example.com", "*.example.org"]
SECRET = "sk-live-5ecret-d0-not-leak"


def api_key(inject: dict[str, str], hosts: list[str] | None = None) -> dict[str, Any]:
    return {"kind": "api_key", "hosts": hosts or ["api.example.com"], "inject": inject, "secret": SECRET}


def assert_no_secret(answer: dict[str, Any], secret: str = SECRET) -> None:
    assert secret not in json.dumps(answer)


async def test_api_key_goes_in_the_header_its_inject_names(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/x", Reply(200))

    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[proxy.seal(api_key({"header": "X-Api-Key"}))],
    )

    assert answer["status"] == 200
    assert api.requests[0].header("x-api-key") == SECRET
    assert_no_secret(answer)


async def test_api_key_goes_in_the_query_parameter_its_inject_names(
    proxy: InProcessProxy, api: Upstream
) -> None:
    api.on("/x", Reply(200))

    answer = await proxy.fetch(
        url="https://api.example.com/x?a=1",
        egress=EGRESS,
        credentials=[proxy.seal(api_key({"query": "key"}))],
    )

    assert api.requests[0].query == {"a": ["1"], "key": [SECRET]}
    assert answer["url"] == "https://api.example.com/x?a=1"
    assert_no_secret(answer)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"kind": "bearer", "secret": SECRET}, f"Bearer {SECRET}"),
        ({"kind": "basic", "secret": {"username": "ann", "password": SECRET}}, basic_value("ann", SECRET)),
        ({"kind": "oauth2", "secret": {"access_token": SECRET}}, f"Bearer {SECRET}"),
    ],
    ids=["bearer", "basic", "oauth2"],
)
async def test_bearer_basic_and_oauth2_go_in_authorization(
    proxy: InProcessProxy, api: Upstream, payload: dict[str, Any], expected: str
) -> None:
    api.on("/x", Reply(200))
    credential = proxy.seal({**payload, "hosts": ["api.example.com"], "inject": None})

    answer = await proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])

    assert answer["status"] == 200
    assert api.requests[0].header("authorization") == expected
    assert_no_secret(answer)


async def test_a_credential_never_reaches_another_allowed_host(
    proxy: InProcessProxy, api: Upstream, other: Upstream
) -> None:
    other.on("/x", Reply(200))
    api.on("/hop", Reply(302, [("Location", "https://other.example.org/x")]))
    credentials = [
        proxy.seal({"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": SECRET}),
        proxy.seal(api_key({"header": "X-Key"}), id="conn_b"),
        proxy.seal(api_key({"query": "key"}), id="conn_c"),
    ]

    direct = await proxy.fetch(url="https://other.example.org/x", egress=EGRESS, credentials=credentials)
    redirected = await proxy.fetch(url="https://api.example.com/hop", egress=EGRESS, credentials=credentials)

    assert direct["status"] == redirected["status"] == 200
    assert redirected["url"] == "https://other.example.org/x" and redirected["redirects"] == 1
    assert api.requests[0].header("authorization") == f"Bearer {SECRET}"
    assert api.requests[0].header("x-key") == SECRET and api.requests[0].query == {"key": [SECRET]}
    assert len(other.requests) == 2
    assert not other.received(SECRET.encode())
    assert all(r.header("authorization") is None and r.header("x-key") is None for r in other.requests)


async def test_a_wildcard_host_takes_the_credential_to_names_under_it(
    proxy: InProcessProxy, other: Upstream
) -> None:
    other.on("/x", Reply(200))
    credential = proxy.seal({"kind": "bearer", "hosts": ["*.example.org"], "inject": None, "secret": SECRET})

    await proxy.fetch(url="https://other.example.org/x", egress=EGRESS, credentials=[credential])

    assert other.requests[0].header("authorization") == f"Bearer {SECRET}"


async def test_a_key_an_upstream_echoes_into_a_redirect_is_not_carried_to_another_host(
    proxy: InProcessProxy, api: Upstream, other: Upstream
) -> None:
    api.on(
        "/hop", lambda r: Reply(302, [("Location", f"https://other.example.org/x?key={r.query['key'][0]}")])
    )
    other.on("/x", Reply(200))

    answer = await proxy.fetch(
        url="https://api.example.com/hop", egress=EGRESS, credentials=[proxy.seal(api_key({"query": "key"}))]
    )

    assert answer["url"] == "https://other.example.org/x"
    assert not other.received(SECRET.encode())
    assert_no_secret(answer)


@pytest.mark.parametrize(
    ("headers", "url", "payload", "named"),
    [
        (
            [["authorization", "Bearer mine"]],
            "https://api.example.com/x",
            {"kind": "bearer"},
            "authorization",
        ),
        ([["X-API-KEY", "mine"]], "https://api.example.com/x", api_key({"header": "x-api-key"}), "x-api-key"),
        ([], "https://api.example.com/x?key=mine", api_key({"query": "key"}), "query parameter key"),
    ],
    ids=["authorization", "header-case-insensitive", "query"],
)
async def test_a_request_setting_what_a_credential_injects_is_refused(
    proxy: InProcessProxy,
    api: Upstream,
    headers: list[list[str]],
    url: str,
    payload: dict[str, Any],
    named: str,
) -> None:
    credential = proxy.seal({"hosts": ["api.example.com"], "inject": None, "secret": SECRET, **payload})

    answer = await proxy.fetch(url=url, headers=headers, egress=EGRESS, credentials=[credential])

    assert answer["error"]["reason"] == "credential_conflict" and answer["error"]["sent"] is False
    assert named in answer["error"]["message"] and "conn_a" in answer["error"]["message"]
    assert api.requests == []


async def test_a_token_sealed_for_another_org_does_not_open(proxy: InProcessProxy, api: Upstream) -> None:
    credential = proxy.seal(
        {"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": SECRET}
    )
    credential["org_id"] = "org_y"

    answer = await proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])

    assert answer == {
        "error": {
            "reason": "credential",
            "message": "the credential conn_a does not open with this proxy's key for organization org_y",
            "sent": False,
        },
        "refreshed": [],
    }
    assert api.requests == []


async def test_a_token_that_is_not_sealed_is_a_credential_error(proxy: InProcessProxy) -> None:
    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[{"id": "conn_a", "org_id": "org_x", "sealed": "b3seal-v1.garbage"}],
    )

    assert answer["error"]["reason"] == "credential"


async def test_a_payload_that_is_no_credential_is_refused_without_quoting_it(proxy: InProcessProxy) -> None:
    credential = proxy.seal(
        {"kind": "api_key", "hosts": ["api.example.com"], "inject": None, "secret": SECRET}
    )

    answer = await proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])

    assert answer["error"]["reason"] == "credential"
    assert answer["error"]["message"].startswith("the credential conn_a is not a valid credential")
    assert_no_secret(answer)


async def test_two_credentials_setting_one_header_on_one_host_are_refused(
    proxy: InProcessProxy, api: Upstream
) -> None:
    bearer = {"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": SECRET}
    basic = {
        "kind": "basic",
        "hosts": ["*.com"],
        "inject": None,
        "secret": {"username": "u", "password": "p"},
    }

    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[proxy.seal(bearer), proxy.seal(basic, id="conn_b")],
    )

    assert answer["error"]["reason"] == "credential_conflict"
    assert answer["error"]["message"] == (
        "credentials conn_a and conn_b both set the header authorization on api.example.com"
    )
    assert api.requests == []
