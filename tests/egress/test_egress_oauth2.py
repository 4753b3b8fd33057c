"""OAuth2: refresh before an expired token, once after a 401, once for many concurrent calls."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import parse_qs

import pytest
from servers import InProcessProxy, Recorded, Reply, Upstream

from egress.sealing import connection_binding, load_or_create_key, open_sealed

EGRESS = ["api.example.com"]
SECRETS = ("old-access-token", "refresh-one", "client-s3cret", "new-access-1")
FAR = "2999-01-01T00:00:00Z"


def oauth(expires_at: Any = FAR, **secret: Any) -> dict[str, Any]:
    return {
        "kind": "oauth2",
        "hosts": ["api.example.com"],
        "inject": None,
        "secret": {
            "access_token": "old-access-token",
            "refresh_token": "refresh-one",
            "expires_at": expires_at,
            "token_url": "https://auth.example.com/token",
            "client_id": "client-1",
            "client_secret": "client-s3cret",
            **secret,
        },
    }


def token_endpoint(auth: Upstream, *, pause_s: float = 0.0) -> None:
    def answer(request: Recorded) -> Reply:
        time.sleep(pause_s)  # lets concurrent calls pile up behind the first refresh
        n = auth.hits("/token")
        body = {"access_token": f"new-access-{n}", "expires_in": 3600, "refresh_token": "refresh-two"}
        return Reply(200, [("Content-Type", "application/json")], json.dumps(body).encode())

    auth.on("/token", answer)


def only_new_token(request: Recorded) -> Reply:
    ok = request.header("authorization") == "Bearer new-access-1"
    return Reply(200 if ok else 401, body=b"fine" if ok else b"expired")


def assert_no_secret(answer: dict[str, Any]) -> None:
    text = json.dumps(answer)
    assert not [s for s in SECRETS if s in text]


def opened(proxy: InProcessProxy, sealed: str) -> dict[str, Any]:
    key = load_or_create_key(proxy.key_file)
    return open_sealed(key, sealed, binding=connection_binding("org_x", "conn_a"))


@pytest.mark.parametrize(
    "expires_at", ["2020-01-01T00:00:00Z", 1577836800, "soon"], ids=["rfc3339", "unix", "within-30s"]
)
async def test_an_expired_token_is_refreshed_before_the_call(
    proxy: InProcessProxy, api: Upstream, auth: Upstream, expires_at: Any
) -> None:
    token_endpoint(auth)
    api.on("/x", only_new_token)
    credential = proxy.seal(oauth(time.time() + 10 if expires_at == "soon" else expires_at))

    answer = await proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])

    assert answer["status"] == 200 and api.hits("/x") == 1
    assert parse_qs(auth.requests[0].body.decode()) == {
        "grant_type": ["refresh_token"],
        "refresh_token": ["refresh-one"],
        "client_id": ["client-1"],
        "client_secret": ["client-s3cret"],
    }
    [refreshed] = answer["refreshed"]
    assert refreshed["id"] == "conn_a" and refreshed["sealed"] != credential["sealed"]
    secret = opened(proxy, refreshed["sealed"])["secret"]
    assert (secret["access_token"], secret["refresh_token"]) == ("new-access-1", "refresh-two")
    assert secret["expires_at"] > time.time() + 3000
    assert_no_secret(answer)

    again = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[{**credential, "sealed": refreshed["sealed"]}],
    )
    assert again["status"] == 200 and again["refreshed"] == [] and auth.hits("/token") == 1


async def test_a_401_refreshes_once_and_retries_once(
    proxy: InProcessProxy, api: Upstream, auth: Upstream
) -> None:
    token_endpoint(auth)
    api.on("/x", only_new_token)

    answer = await proxy.fetch(
        url="https://api.example.com/x", egress=EGRESS, credentials=[proxy.seal(oauth())]
    )

    assert answer["status"] == 200 and answer["body"] == "ZmluZQ=="
    assert (auth.hits("/token"), api.hits("/x")) == (1, 2)
    assert [r.header("authorization") for r in api.requests] == [
        "Bearer old-access-token",
        "Bearer new-access-1",
    ]
    assert len(answer["refreshed"]) == 1


async def test_a_second_401_is_the_answer(proxy: InProcessProxy, api: Upstream, auth: Upstream) -> None:
    token_endpoint(auth)
    api.on("/x", Reply(401, body=b"no"))

    answer = await proxy.fetch(
        url="https://api.example.com/x", egress=EGRESS, credentials=[proxy.seal(oauth())]
    )

    assert answer["status"] == 401
    assert (auth.hits("/token"), api.hits("/x")) == (1, 2)


async def test_a_401_without_an_oauth2_credential_is_not_retried(
    proxy: InProcessProxy, api: Upstream
) -> None:
    api.on("/x", Reply(401))
    bearer = {"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": "tok"}

    answer = await proxy.fetch(
        url="https://api.example.com/x", egress=EGRESS, credentials=[proxy.seal(bearer)]
    )

    assert answer["status"] == 401 and api.hits("/x") == 1


async def test_concurrent_calls_with_one_expired_token_refresh_once(
    proxy: InProcessProxy, api: Upstream, auth: Upstream
) -> None:
    token_endpoint(auth, pause_s=0.2)
    api.on("/x", only_new_token)
    credential = proxy.seal(oauth("2020-01-01T00:00:00Z"))

    answers = await asyncio.gather(
        *(
            proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])
            for _ in range(6)
        )
    )

    assert [a["status"] for a in answers] == [200] * 6
    assert auth.hits("/token") == 1
    assert len({a["refreshed"][0]["sealed"] for a in answers}) == 1


async def test_concurrent_401s_refresh_once(proxy: InProcessProxy, api: Upstream, auth: Upstream) -> None:
    token_endpoint(auth, pause_s=0.2)
    api.on("/x", only_new_token)
    credential = proxy.seal(oauth())

    answers = await asyncio.gather(
        *(
            proxy.fetch(url="https://api.example.com/x", egress=EGRESS, credentials=[credential])
            for _ in range(4)
        )
    )

    assert [a["status"] for a in answers] == [200] * 4
    assert auth.hits("/token") == 1


async def test_a_refused_refresh_is_refresh_failed(
    proxy: InProcessProxy, api: Upstream, auth: Upstream
) -> None:
    auth.on("/token", Reply(400, body=b'{"error": "invalid_grant"}'))

    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[proxy.seal(oauth("2020-01-01T00:00:00Z"))],
    )

    assert answer["error"] == {
        "reason": "refresh_failed",
        "message": (
            "the token endpoint https://auth.example.com/token answered 400"
            " to the refresh of credential conn_a"
        ),
        "sent": False,
    }
    assert api.requests == []
    assert_no_secret(answer)


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ({"token_url": "http://auth.example.com/token"}, "is not an https URL"),
        ({"token_url": "https://127.0.0.1/token"}, "127.0.0.1 is a loopback address"),
        ({"refresh_token": None}, "holds no refresh token"),
    ],
    ids=["http", "private", "no-refresh-token"],
)
async def test_a_refresh_that_cannot_run_is_refresh_failed(
    proxy: InProcessProxy, api: Upstream, secret: dict[str, Any], says: str
) -> None:
    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[proxy.seal(oauth("2020-01-01T00:00:00Z", **secret))],
    )

    assert answer["error"]["reason"] == "refresh_failed" and says in answer["error"]["message"]
    assert api.requests == []
    assert_no_secret(answer)


async def test_a_refreshed_token_is_returned_even_when_the_call_then_fails(
    proxy: InProcessProxy, api: Upstream, auth: Upstream
) -> None:
    token_endpoint(auth)
    api.on("/x", Reply(200, body=b"x" * 5000))

    answer = await proxy.fetch(
        url="https://api.example.com/x",
        egress=EGRESS,
        credentials=[proxy.seal(oauth("2020-01-01T00:00:00Z"))],
        max_body_bytes=100,
    )

    assert answer["error"]["reason"] == "body_too_large"
    assert len(answer["refreshed"]) == 1
