"""Declarative HTTP actions on the real stack: the api's HTTP runtime, the real egress proxy, connections
with injected credentials; loopback HTTPS stand-ins of the remote hosts are the only fakes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any
from urllib.parse import quote

import httpx
import loopback
import pytest
from sqlmodel import Session, select
from workers import PATIENCE_S

from api.connections.tables import ConnectionRecord

from .calltest import call, error, usage
from .stack import PROBE, REPO, Org, Stack

sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

SEARCH = "io.b3os/open-meteo/search-places@1"
BERLIN = {"name": "Berlin", "latitude": 52.52437, "longitude": 13.41053, "timezone": "Europe/Berlin"}
CONNECTOR_SCOPES = ("actions:call", "connections:write", "connections:read")


def json_reply(body: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, [("Content-Type", "application/json"), *(headers or [])], json.dumps(body).encode())


def connect(stack: Stack, org: Org, connection: str, secret: Any, **params: Any) -> dict[str, Any]:
    body = {"pack": PROBE, "connection": connection, "secret": secret, "params": params}
    r = loopback.post(f"{stack.url}/v1/connections", headers=org.headers, json=body, timeout=30)
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_the_seed_open_meteo_example_answers_through_the_proxy_metered_as_one_action_call(
    stack: Stack,
) -> None:
    geo = stack.upstreams["geocoding-api.open-meteo.com"]
    geo.on("/v1/search", json_reply({"results": [BERLIN], "generationtime_ms": 0.5}))
    org = stack.org()
    r = call(stack, org, SEARCH, {"name": "Berlin"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tier"] == "http" and body["ref"] == "io.b3os/open-meteo/search-places@1.0.0"
    assert body["output"] == {"places": [BERLIN]}
    assert body["cost"] == {"compute": 0, "floor": 10, "price": 0, "total": 10}
    assert set(body["timings"]) == {"validate", "template", "egress", "upstream", "map", "cost"}
    sent = geo.requests[-1]
    assert (sent.method, sent.path, sent.query) == (
        "GET",
        "/v1/search",
        {"name": ["Berlin"], "format": ["json"]},
    )
    used = usage(stack, org)
    assert (
        used["calls"] == 1 and used["units"]["actions.call"] == 1 and used["units"]["actions.tool_call"] == 0
    )
    geo.on("/v1/search", json_reply({"generationtime_ms": 0.5}))  # no match: the map's default
    assert call(stack, org, SEARCH, {"name": "Nowhere"}).json()["output"] == {"places": []}


def test_input_is_checked_against_the_input_schema_before_anything_is_sent(stack: Stack) -> None:
    geo = stack.upstreams["geocoding-api.open-meteo.com"]
    before = len(geo.requests)
    err = error(call(stack, stack.org(), SEARCH, {"name": "B"}), 400, "invalid_request")
    assert err["message"] == "input.name: 'B' is too short"
    assert len(geo.requests) == before


@pytest.mark.parametrize("path", ["a/b", "x?y=1", "frag#x", "100%", "ünï ☃", "..a"])
def test_text_spliced_into_the_url_reaches_the_upstream_as_one_path_segment(stack: Stack, path: str) -> None:
    api = stack.upstreams["api.example.com"]
    api.on("/public/" + quote(path, safe=""), json_reply({}))
    r = call(stack, stack.org(), f"{PROBE}/public@1", {"path": path, "q": "a&b=#"})
    sent = api.requests[-1]
    assert sent.target.split("?")[0].count("/") == 2, sent.target
    assert httpx.URL("https://x" + sent.target).path == f"/public/{path}"
    assert sent.query == {"q": ["a&b=#"]}
    assert r.status_code == 200, r.text


def test_a_dot_segment_from_the_input_is_refused_and_nothing_is_sent(stack: Stack) -> None:
    api = stack.upstreams["api.example.com"]
    before = len(api.requests)
    err = error(call(stack, stack.org(), f"{PROBE}/public@1", {"path": ".."}), 400, "invalid_request")
    assert "'.' or '..'" in err["message"]
    assert len(api.requests) == before


def test_a_call_without_the_connection_it_needs_says_how_to_add_it(stack: Stack) -> None:
    r = call(stack, stack.org(), f"{PROBE}/get@1", {"id": 1})
    err = error(r, 400, "invalid_request", "connection_missing")
    assert err["connection"] == "token"
    assert "b3os connection add com.example.tools/probe token --secret-stdin" in err["message"]


def test_the_bearer_secret_reaches_only_its_hosts_and_its_params_are_in_scope(stack: Stack) -> None:
    api, other = stack.upstreams["api.example.com"], stack.upstreams["other.example.org"]
    org = stack.org(scopes=CONNECTOR_SCOPES)
    secret = "sk-live-bearer-0123456789abcdef"
    added = connect(stack, org, "token", secret, region="us")
    assert added["hint"] == "cdef" and secret not in json.dumps(added)
    api.on("/items/7", json_reply({"id": 7, "name": "seven"}))
    r = call(stack, org, f"{PROBE}/get@1", {"id": 7})
    assert r.status_code == 200, r.text
    assert r.json()["output"] == {"item": {"id": 7, "name": "seven"}, "region": "us"}
    assert r.json()["cost"] == {"compute": 0, "floor": 10, "price": 200, "total": 210}
    sent = api.requests[-1]
    assert sent.header("Authorization") == f"Bearer {secret}" and sent.query == {"region": ["us"]}
    # another allowed host, directly and through a redirect: never the secret
    other.on("/seen", json_reply({"seen": True}))
    assert call(stack, org, f"{PROBE}/other@1").json()["output"] == {"seen": True}
    api.on("/hop/away", Reply(302, [("Location", "https://other.example.org/seen")]))
    hop = call(stack, org, f"{PROBE}/hop@1", {"name": "away"})
    assert hop.json()["output"] == {"seen": True}, hop.text
    assert other.hits("/seen") == 2 and not other.received(secret.encode())
    assert other.requests[-1].header("Authorization") is None


def test_a_redirect_outside_egress_is_refused_and_charged_only_the_floor(stack: Stack) -> None:
    org = stack.org(scopes=CONNECTOR_SCOPES)
    connect(stack, org, "token", "sk-redirect-0123456789")
    stack.upstreams["api.example.com"].on(
        "/hop/evil", Reply(302, [("Location", "https://evil.example.net/x")])
    )
    err = error(call(stack, org, f"{PROBE}/hop@1", {"name": "evil"}), 502, "action_failed", "egress_refused")
    assert "evil.example.net" in err["message"]
    assert err["cost"] == {"compute": 0, "floor": 10, "price": 0, "total": 10}


def test_a_failed_status_names_the_pack_error_and_is_never_priced(stack: Stack) -> None:
    org = stack.org(scopes=CONNECTOR_SCOPES)
    connect(stack, org, "token", "sk-errors-0123456789")
    stack.upstreams["api.example.com"].on("/items/404", json_reply({"message": "Not Found"}, 404))
    err = error(call(stack, org, f"{PROBE}/get@1", {"id": 404}), 502, "action_failed", "status")
    assert err["pack_error"] == {"code": "no_item", "message": "there is no item 404"}
    assert err["upstream_status"] == 404 and err["retryable"] is False
    assert err["message"] == "com.example.tools/probe: no_item: there is no item 404"
    assert err["cost"]["price"] == 0 and err["cost"]["floor"] == 10


def test_one_idempotency_key_sends_one_upstream_request(stack: Stack) -> None:
    api = stack.upstreams["api.example.com"]
    api.on("/public/once", json_reply({"n": 1}))
    org = stack.org()
    first = call(stack, org, f"{PROBE}/public@1", {"path": "once"}, key="http-once-1")
    again = call(stack, org, f"{PROBE}/public@1", {"path": "once"}, key="http-once-1")
    assert first.status_code == again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert api.hits("/public/once") == 1
    assert usage(stack, org)["units"]["actions.call"] == 1


def test_an_upstream_429_comes_back_with_its_retry_after_and_nothing_billed(stack: Stack) -> None:
    stack.upstreams["api.example.com"].on("/public/busy", json_reply({}, 429, [("Retry-After", "2")]))
    org = stack.org()
    r = call(stack, org, f"{PROBE}/public@1", {"path": "busy"})
    err = error(r, 429, "rate_limited", "upstream")
    assert r.headers["Retry-After"] == "2" and err["upstream_status"] == 429
    stack.upstreams["api.example.com"].on("/public/down", Reply(503, [("Retry-After", "3")]))
    r = call(stack, org, f"{PROBE}/public@1", {"path": "down"})
    assert error(r, 503, "action_unavailable", "upstream")["retry_after"] == 3
    assert usage(stack, org)["cost"]["total"] == 0


def test_a_post_body_keeps_its_types_and_defaults(stack: Stack) -> None:
    api = stack.upstreams["api.example.com"]
    api.on("/items", lambda req: json_reply({"created": json.loads(req.body)}, 201))
    org = stack.org(scopes=CONNECTOR_SCOPES)
    connect(stack, org, "token", "sk-post-0123456789")
    r = call(stack, org, f"{PROBE}/create@1", {"name": "new"})
    assert r.json()["output"] == {"created": {"name": "new", "count": 1}}, r.text
    assert api.requests[-1].header("Content-Type") == "application/json"


def test_an_expired_oauth2_token_is_refreshed_once_and_the_new_one_kept_sealed(stack: Stack) -> None:
    api, auth = stack.upstreams["api.example.com"], stack.upstreams["auth.example.com"]
    refreshed = {"n": 0}

    def token(req: Recorded) -> Reply:
        refreshed["n"] += 1
        assert b"refresh_token=rt-0123456789abcdef" in req.body
        return json_reply({"access_token": f"at-new-{refreshed['n']}-0123456789", "expires_in": 3600})

    auth.on("/token", token)
    api.on("/me", lambda req: json_reply({"auth": req.header("Authorization")}))
    org = stack.org(scopes=CONNECTOR_SCOPES)
    secret = {
        "access_token": "at-old-0123456789abcdef",
        "refresh_token": "rt-0123456789abcdef",
        "expires_at": int(time.time()) - 60,
        "token_url": "https://auth.example.com/token",
        "client_id": "client-1",
        "client_secret": "cs-0123456789abcdef",
    }
    added = connect(stack, org, "oauth", secret)
    with Session(stack.engine) as session:
        before = session.exec(select(ConnectionRecord).where(ConnectionRecord.id == added["id"])).one().sealed
    first = call(stack, org, f"{PROBE}/me@1")
    assert first.json()["output"] == {"auth": "Bearer at-new-1-0123456789"}, first.text
    second = call(stack, org, f"{PROBE}/me@1")
    assert second.json()["output"] == {"auth": "Bearer at-new-1-0123456789"}
    assert refreshed["n"] == 1 and auth.hits("/token") == 1
    with Session(stack.engine) as session:
        after = session.exec(select(ConnectionRecord).where(ConnectionRecord.id == added["id"])).one().sealed
    assert after != before and "at-new" not in after


def test_an_api_whose_proxy_cannot_be_reached_answers_503_with_retry_after(stack: Stack) -> None:
    url, proc = stack.start_api(extra_env={"B3OS_EGRESS_URL": "http://127.0.0.1:9"}, listed=False)
    try:
        r = call(stack, stack.org(), f"{PROBE}/public@1", {"path": "x"}, url=url)
        err = error(r, 503, "action_unavailable", "egress")
        assert "nothing was billed" in err["message"]
    finally:
        proc.stop()


def test_b3os_call_runs_an_http_action_and_prints_its_output(stack: Stack) -> None:
    stack.upstreams["geocoding-api.open-meteo.com"].on("/v1/search", json_reply({"results": [BERLIN]}))
    org = stack.org()
    env = stack.env(B3OS_API_URL=stack.url, B3OS_API_KEY=org.key)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "call", SEARCH, "--input", '{"name": "Berlin"}'],
        env=env,
        cwd=stack.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"places": [BERLIN]}


async def test_mcp_lists_the_http_actions_and_calls_one_through_the_official_client(stack: Stack) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    stack.upstreams["geocoding-api.open-meteo.com"].on("/v1/search", json_reply({"results": [BERLIN]}))
    org = stack.org()
    async with (
        httpx2.AsyncClient(headers=org.headers, timeout=60) as http,
        streamable_http_client(f"{stack.url}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        search = tools["open-meteo__search-places"]
        assert search.input_schema["required"] == ["name"]
        assert (search.meta or {})["b3os/pin"] == "io.b3os/open-meteo/search-places@1.0.0"
        result = await session.call_tool("open-meteo__search-places", {"name": "Berlin"})
        assert not result.is_error and result.structured_content == {"places": [BERLIN]}
        missing = await session.call_tool("probe__get", {"id": 1})
        assert missing.is_error
        assert "connection 'token'" in missing.content[0].text  # type: ignore[union-attr]
    assert usage(stack, org)["units"]["actions.call"] == 1


def test_http_calls_have_their_own_lane_of_eight_at_once_beside_tool_calls(stack: Stack) -> None:
    import concurrent.futures

    api = stack.upstreams["api.example.com"]
    api.release.clear()
    api.on("/public/slow", Reply(200, [("Content-Type", "application/json")], b"{}", hold=True))
    org = stack.org()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        slow = [pool.submit(call, stack, org, f"{PROBE}/public@1", {"path": "slow"}) for _ in range(8)]
        deadline = time.monotonic() + PATIENCE_S
        while api.hits("/public/slow") < 8:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ninth = call(stack, org, f"{PROBE}/public@1", {"path": "slow"})
        err = error(ninth, 429, "concurrency_limited")
        assert err["limit"] == 8 and "8 HTTP action calls at once" in err["message"]
        tool = call(stack, org, "com.example.tools/free/noop@1")  # tool calls count apart
        assert tool.status_code == 200, tool.text
        api.release.set()
        assert [f.result().status_code for f in slow] == [200] * 8


def test_http_calls_count_against_the_key_spend_cap_like_tool_calls(stack: Stack) -> None:
    stack.upstreams["api.example.com"].on("/public/capped", json_reply({}))
    org = stack.org(cap=215)  # one priced call (200 + the 10 floor) fits, a second does not
    assert call(stack, org, f"{PROBE}/public@1", {"path": "capped"}).status_code == 200
    err = error(call(stack, org, f"{PROBE}/public@1", {"path": "capped"}), 429, "quota_exceeded")
    assert err["limit"] == "key_spend_cap" and err["spent_microusd"] == 210
