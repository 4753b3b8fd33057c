"""A js call's fetch through the egress proxy: real VMs, a real `b3os egress run`, HTTPS stand-ins."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from jstest import js_call
from nodetest import REPO, leftovers

from egress.grants import Grant, sign_grant
from node.cache import InstallCache
from node.models import NodeCall
from node.runner import Runner
from node.vm.bwrap import BwrapDriver

sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import (  # noqa: E402
    ProxyProcess,
    Recorded,
    Reply,
    Upstream,
    make_ca,
    proxy_env,
    sealed_credential,
    start_proxy,
)

SECRET = "ghp_jsTokenNeverSeen42"


@pytest.fixture
def stand_ins(tmp_path: Path) -> Iterator[tuple[trustme.CA, Upstream, Upstream]]:
    ca = make_ca()
    api, other = Upstream(ca, ["api.github.com"]), Upstream(ca, ["other.example.org"])
    yield ca, api, other
    api.close()
    other.close()


@pytest.fixture
def proxy(stand_ins: tuple[trustme.CA, Upstream, Upstream], tmp_path: Path) -> Iterator[ProxyProcess]:
    ca, api, other = stand_ins
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    running = start_proxy(proxy_env(ca_file, api, other), tmp_path)
    yield running
    running.stop()


@pytest.fixture
def fetch_runner(js_runner: Runner, driver: BwrapDriver, proxy: ProxyProcess) -> Iterator[Runner]:
    runner = Runner(driver, js_runner.cache, slots=4, js_runtime=js_runner.js.runtime, egress_url=proxy.url)
    yield runner
    runner.js.close()
    assert leftovers(driver) == []


def _grant(proxy: ProxyProcess, egress: list[str], timeout_s: float = 30) -> str:
    bearer = sealed_credential(
        proxy.public_key, {"kind": "bearer", "hosts": ["api.github.com"], "inject": None, "secret": SECRET}
    )
    grant = Grant(
        call_id="c",
        pack="io.b3os/github",
        egress=egress,
        credentials=[bearer],
        expires_at=time.time() + timeout_s,
    )
    return sign_grant(proxy.token, grant)


def _fetch(runner: Runner, proxy: ProxyProcess, url: str, egress: list[str], **more: Any) -> dict[str, Any]:
    result = runner.call(js_call("fetchUrl", {"url": url, **more}, grant=_grant(proxy, egress)))
    if result.ok:
        return dict(result.output or {})
    assert result.error is not None
    return {"error": result.error.model_dump(exclude_none=True)}


def test_fetch_reaches_the_stand_in_with_the_token_injected_by_the_proxy(
    fetch_runner: Runner, proxy: ProxyProcess, stand_ins: tuple[trustme.CA, Upstream, Upstream]
) -> None:
    _, api, _ = stand_ins
    api.on("/repos/o/r", Reply(200, [("content-type", "application/json")], b'{"full_name": "o/r"}'))
    out = _fetch(fetch_runner, proxy, "https://api.github.com/repos/o/r", ["api.github.com"])
    assert out == {
        "status": 200,
        "url": "https://api.github.com/repos/o/r",
        "body": '{"full_name": "o/r"}',
        "link": None,
    }
    assert api.requests[-1].header("authorization") == f"Bearer {SECRET}"
    assert SECRET.encode() not in proxy.log_bytes()


def test_the_token_goes_to_no_other_host_even_one_the_pack_may_reach(
    fetch_runner: Runner, proxy: ProxyProcess, stand_ins: tuple[trustme.CA, Upstream, Upstream]
) -> None:
    _, api, other = stand_ins
    other.on("/collect", Reply(200, [], b"ok"))
    out = _fetch(
        fetch_runner, proxy, "https://other.example.org/collect", ["api.github.com", "other.example.org"]
    )
    assert out["status"] == 200
    assert other.requests[-1].header("authorization") is None and not other.received(SECRET.encode())
    refused = _fetch(fetch_runner, proxy, "https://other.example.org/collect", ["api.github.com"])
    assert refused["error"]["tool_code"] == "js.thrown"
    assert refused["error"]["tool_message"].startswith("TypeError: fetch failed: ")
    assert "other.example.org" in refused["error"]["tool_message"]
    assert len(other.requests) == 1


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1/", "https://169.254.169.254/latest/meta-data/", "http://api.github.com/"]
)
def test_fetch_to_loopback_metadata_or_plain_http_is_refused(
    fetch_runner: Runner, proxy: ProxyProcess, url: str
) -> None:
    out = _fetch(fetch_runner, proxy, url, ["api.github.com"])
    assert out["error"]["tool_code"] == "js.thrown", out
    assert out["error"]["tool_message"].startswith("TypeError: fetch failed: ")


def _issues(request: Recorded) -> Reply:
    page = int(request.query.get("page", ["1"])[0])
    items = [
        {
            "number": n,
            "title": f"issue {n}",
            "html_url": f"https://github.com/o/r/issues/{n}",
            "user": {"login": "a"},
        }
        for n in range(page * 10 - 9, page * 10 + 1)
    ]
    items.append({"number": 1000 + page, "title": "a pull request", "pull_request": {}, "user": None})
    headers = [("content-type", "application/json")]
    if page < 3:
        nxt = f"https://api.github.com/repositories/1/issues?state=open&per_page=100&page={page + 1}"
        headers.append(
            (
                "link",
                f'<{nxt}>; rel="next", <https://api.github.com/repositories/1/issues?page=3>; rel="last"',
            )
        )
    return Reply(200, headers, json.dumps(items).encode())


def test_the_example_list_open_issues_pages_through_link_headers(
    fetch_runner: Runner, proxy: ProxyProcess, stand_ins: tuple[trustme.CA, Upstream, Upstream]
) -> None:
    _, api, _ = stand_ins
    api.on("/repos/o/r/issues", _issues)
    api.on("/repositories/1/issues", _issues)
    cache: InstallCache = fetch_runner.cache
    code = REPO / "examples" / "packs" / "github" / "js"
    cache.install_files(
        "io.b3os/github", "1.0.0", {f"js/{p.name}": p.read_bytes() for p in code.glob("*.js")}, {}
    )
    call = NodeCall(
        call_id=f"tcall_issues_{time.monotonic_ns()}",
        pack="io.b3os/github",
        version="1.0.0",
        action="list-open-issues",
        timeout_ms=20_000,
        input={"owner": "o", "repo": "r", "maxIssues": 1000},
        js={"entry": "js/issues.js", "export": "listOpenIssues", "grant": _grant(proxy, ["api.github.com"])},
    )
    result = fetch_runner.call(call)
    assert result.ok, result.error
    assert result.output is not None
    assert (result.output["count"], result.output["pages"], result.output["truncated"]) == (30, 3, False)
    assert [i["number"] for i in result.output["issues"]] == list(range(1, 31))
    assert len(api.requests) == 3
    assert all(r.header("authorization") == f"Bearer {SECRET}" for r in api.requests)


def test_an_oauth2_token_the_proxy_refreshed_comes_back_sealed_for_the_api_not_to_the_code(
    fetch_runner: Runner, proxy: ProxyProcess, stand_ins: tuple[trustme.CA, Upstream, Upstream]
) -> None:
    _, api, other = stand_ins
    other.on(
        "/token", Reply(200, [("content-type", "application/json")], b'{"access_token": "fresh-token-1"}')
    )
    api.on("/user", Reply(200, [], b"me"))
    payload = {
        "access_token": "stale-token",
        "refresh_token": "r1",
        "expires_at": 1,
        "token_url": "https://other.example.org/token",
        "client_id": "c",
        "client_secret": "s",
    }
    oauth = sealed_credential(
        proxy.public_key, {"kind": "oauth2", "hosts": ["api.github.com"], "inject": None, "secret": payload}
    )
    grant = Grant(
        call_id="c",
        pack="io.b3os/github",
        egress=["api.github.com"],
        credentials=[oauth],
        expires_at=time.time() + 30,
    )
    call = js_call("fetchUrl", {"url": "https://api.github.com/user"}, grant=sign_grant(proxy.token, grant))
    result = fetch_runner.call(call)
    assert result.ok and result.output is not None and result.output["body"] == "me", result.error
    assert api.requests[-1].header("authorization") == "Bearer fresh-token-1"
    assert [r["id"] for r in result.refreshed] == [oauth["id"]]
    assert (
        result.refreshed[0]["sealed"].startswith("b3seal-v1.")
        and result.refreshed[0]["sealed"] != oauth["sealed"]
    )
    assert b"fresh-token-1" not in json.dumps(result.output).encode()
