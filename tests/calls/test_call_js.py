"""JS actions on the real stack: the api places the call on a node, whose JS runtime runs the pack's code;
its fetch goes through the real egress proxy with the connection's token; stand-ins are the only fakes."""

from __future__ import annotations

import json
import sys
from typing import Any

import loopback
from timeouts import is_timeout_sentence

from .calltest import call, error, usage
from .stack import REPO, Org, Stack

sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

LIST = "io.b3os/github/list-open-issues@1"
GITHUB = "io.b3os/github"
SECRET = "ghp_jsStackToken0123456789"
CONNECTOR_SCOPES = ("actions:call", "connections:write", "connections:read", "usage:read")


def _connect(stack: Stack, org: Org) -> None:
    body = {"pack": GITHUB, "connection": "token", "secret": SECRET, "params": {}}
    r = loopback.post(f"{stack.url}/v1/connections", headers=org.headers, json=body, timeout=30)
    assert r.status_code == 201, r.text


def _pages(request: Recorded) -> Reply:
    page = int(request.query.get("page", ["1"])[0])
    items: list[dict[str, Any]] = [
        {
            "number": n,
            "title": f"#{n}",
            "html_url": f"https://github.com/o/r/issues/{n}",
            "user": {"login": "u"},
        }
        for n in range(page * 2 - 1, page * 2 + 1)
    ]
    headers = [("content-type", "application/json")]
    if page < 2:
        headers.append(("link", '<https://api.github.com/repositories/9/issues?page=2>; rel="next"'))
    return Reply(200, headers, json.dumps(items).encode())


def test_a_js_action_pages_through_the_api_with_the_token_metered_as_a_tool_and_two_exchanges(
    stack: Stack,
) -> None:
    gh = stack.upstreams["api.github.com"]
    gh.on("/repos/o/r/issues", _pages)
    gh.on("/repositories/9/issues", _pages)
    org = stack.org(scopes=CONNECTOR_SCOPES)
    _connect(stack, org)
    before = len(gh.requests)
    r = call(stack, org, LIST, {"owner": "o", "repo": "r"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tier"] == "js" and body["ref"] == "io.b3os/github/list-open-issues@1.0.0"
    assert body["output"]["count"] == 4 and body["output"]["pages"] == 2
    assert [i["number"] for i in body["output"]["issues"]] == [1, 2, 3, 4]
    assert set(body["timings"]) == {"validate", "start", "copy", "unpack", "run", "collect", "delete", "cost"}
    sent = gh.requests[before:]
    assert [s.path for s in sent] == ["/repos/o/r/issues", "/repositories/9/issues"]
    assert all(s.header("Authorization") == f"Bearer {SECRET}" for s in sent)
    assert body["cost"]["floor"] == 10 + 2 * 10 and body["cost"]["price"] == 0
    units = usage(stack, org)["units"]
    assert units["actions.tool_call"] == 1 and units["actions.call"] == 2


def test_a_thrown_declared_error_is_the_pack_error_and_never_priced(stack: Stack) -> None:
    gh = stack.upstreams["api.github.com"]
    gh.on("/repos/o/gone/issues", Reply(404, [("content-type", "application/json")], b"{}"))
    org = stack.org(scopes=CONNECTOR_SCOPES)
    _connect(stack, org)
    err = error(call(stack, org, LIST, {"owner": "o", "repo": "gone"}), 502, "action_failed", "pack_error")
    assert err["pack_error"] == {
        "code": "repo_not_found",
        "message": "There is no repository o/gone, or the token cannot see it.",
    }
    assert err["retryable"] is False and err["tier"] == "js"
    assert err["cost"]["price"] == 0


def test_a_js_call_without_its_connection_says_how_to_add_it(stack: Stack) -> None:
    err = error(call(stack, stack.org(), LIST, {"owner": "o", "repo": "r"}), 400, "invalid_request")
    assert err["reason"] == "connection_missing"
    assert "b3os connection add io.b3os/github token --secret-stdin" in err["message"]


JS_PROBE = "io.b3os/js-probe"


def test_a_js_call_that_answers_is_charged_its_compute_and_the_tool_floor(stack: Stack) -> None:
    body = call(stack, stack.org(), f"{JS_PROBE}/answer@1", {}).json()
    assert body["output"] == {"got": 42} and body["tier"] == "js"  # the input's default filled in
    cost = body["cost"]
    assert cost["floor"] == 10 and cost["price"] == 0 and cost["total"] == cost["compute"] + 10


def test_hostile_js_ends_with_its_error_never_charged_the_price_and_the_node_keeps_serving(
    stack: Stack,
) -> None:
    org = stack.org()
    spin = error(call(stack, org, f"{JS_PROBE}/spin@1", {}), 504, "tool_timed_out")
    assert is_timeout_sentence(spin["message"], 1500)
    hog = error(call(stack, org, f"{JS_PROBE}/hog@1", {}), 502, "tool_failed")
    assert hog["reason"] in ("signal", "exit")
    shout = error(call(stack, org, f"{JS_PROBE}/shout@1", {}), 502, "tool_failed", "output_too_large")
    for err in (spin, hog, shout):
        assert err["cost"]["price"] == 0 and err["cost"]["floor"] == 10 and err["tier"] == "js"
    metadata = error(
        call(stack, org, f"{JS_PROBE}/fetch-path@1", {"url": "https://169.254.169.254/latest/meta-data/"}),
        502,
        "action_failed",
        "js_error",
    )
    assert metadata["message"].startswith("the action's code failed: TypeError: fetch failed: ")
    assert metadata["cost"]["price"] == 0
    assert call(stack, org, f"{JS_PROBE}/answer@1", {"n": 1}).json()["output"] == {"got": 2}
