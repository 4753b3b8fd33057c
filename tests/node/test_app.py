"""The node as its own process (`b3os node run`), called over HTTP like the api calls it."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import loopback
import pytest
from nodetest import NODE_ENV, NODE_ID, NODE_SECRET, NODE_UID_BASE, REPO, echo_call, node_request
from workers import PATIENCE_S, free_port, node_cgroups

from node.cache import InstallCache
from node.credential import ANSWER_PROOF_HEADER, PROOF_HEADER, TIMESTAMP_HEADER, answer_is_proven, call_key


@pytest.fixture(scope="module")
def node_url(cache: InstallCache, base_rootfs: Path) -> Iterator[str]:
    port = free_port()
    run_dir = Path(tempfile.mkdtemp(prefix="b3os-node-vms-", dir="/tmp"))
    env = {
        **os.environ,
        **NODE_ENV,
        "B3OS_CACHE_DIR": str(cache.root),
        "B3OS_RUN_DIR": str(run_dir),
        "B3OS_VM_UID_BASE": str(NODE_UID_BASE),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "node", "run", "--port", str(port)], cwd=REPO, env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            if node_request("GET", f"{url}/v1/node/status").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "the node did not start"
        time.sleep(0.1)
    yield url
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
    assert list(run_dir.iterdir()) == [], "the node left VM directories behind"
    assert not node_cgroups(proc.pid)
    run_dir.rmdir()


def _post(url: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return node_request("POST", f"{url}/v1/node/calls", body, **kw)


def test_echo_noop_over_http(node_url: str) -> None:
    resp = _post(node_url, echo_call("noop", {}).model_dump())
    assert resp.status_code == 200
    body = resp.json()
    assert (body["ok"], body["ran"], body["output"], body["error"]) == (True, True, {}, None)
    assert list(body["timings"]) == ["start", "copy", "unpack", "run", "collect", "delete"]
    assert body["usage"]["vcpu_ms"] >= 1 and body["usage"]["gib_ms"] >= 1


def test_echo_text_and_file_over_http(node_url: str) -> None:
    file = {"$bytes": "aGVsbG8K", "name": "hello.txt", "contentType": "text/plain"}
    body = _post(node_url, echo_call("echo", {"text": "hi", "file": file}).model_dump()).json()
    assert body["output"] == {
        "text": "hi",
        "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"},
    }


def test_echo_fail_over_http(node_url: str) -> None:
    ask = {"mode": "tool_error", "code": "nope", "message": "asked to fail", "retryable": True}
    body = _post(node_url, echo_call("fail", ask).model_dump()).json()
    assert (body["ok"], body["ran"]) == (False, True)
    assert body["error"] == {
        "code": "tool_failed",
        "reason": "tool_error",
        "message": "the tool answered with its error nope: asked to fail",
        "tool_code": "nope",
        "tool_message": "asked to fail",
        "retryable": True,
    }


def test_the_answer_carries_the_nodes_proof_over_the_request(node_url: str) -> None:
    resp = _post(node_url, echo_call("noop", {}).model_dump())
    assert resp.status_code == 200
    proof = resp.request.headers[PROOF_HEADER]
    key = call_key(NODE_SECRET)
    args = {"node_id": NODE_ID, "status": 200, "body": resp.content, "headers": resp.headers}
    assert answer_is_proven(key, proof=proof, **args)
    assert not answer_is_proven(key, proof="0" * 64, **args)  # not an answer to another request
    assert not answer_is_proven(call_key("b3n_" + "x" * 40), proof=proof, **args)  # nor of another node


def test_a_call_without_the_apis_proof_is_refused_and_runs_nothing(node_url: str) -> None:
    call = echo_call("noop", {}).model_dump()
    unproven = (
        "The request has no proof of the api (X-B3os-Node, X-B3os-Timestamp, X-B3os-Nonce, X-B3os-Proof)."
    )
    refusals = {
        unproven: loopback.post(
            f"{node_url}/v1/node/calls", json=call, headers={"Authorization": f"Bearer {NODE_SECRET}"}
        ),
        "The request's proof is not the api's for this node.": _post(
            node_url, call, secret="b3n_" + "w" * 40
        ),
        f"The request is for node 'evil-node', not this node ({NODE_ID}).": _post(
            node_url, call, node_id="evil-node"
        ),
    }
    for message, resp in refusals.items():
        assert resp.status_code == 401
        assert resp.json()["error"] == {"code": "unauthorized", "message": message}
        assert ANSWER_PROOF_HEADER.lower() not in resp.headers
    # a proven request whose body was changed on the way
    signed = _post(node_url, echo_call("noop", {}).model_dump())
    headers = {k: v for k, v in signed.request.headers.items() if k.lower().startswith("x-b3os")}
    other = echo_call("echo", {"text": "injected"}).model_dump()
    changed = loopback.post(f"{node_url}/v1/node/calls", json=other, headers=headers, timeout=30)
    assert changed.json()["error"]["message"] == "The request's proof is not the api's for this node."
    # the same request again (a replay), and one from too long ago
    replay = loopback.post(
        f"{node_url}/v1/node/calls", content=signed.request.content, headers=headers, timeout=30
    )
    assert replay.json()["error"]["message"] == "The request was already received (a replay)."
    old = {**headers, TIMESTAMP_HEADER.lower(): str(int(time.time()) - 301)}
    late = loopback.post(f"{node_url}/v1/node/calls", content=signed.request.content, headers=old, timeout=30)
    assert late.status_code == 401 and "is more than 300 s from this node's clock" in late.text
    status = loopback.get(f"{node_url}/v1/node/status")
    assert status.status_code == 401


def test_a_bad_request_is_400_naming_the_field(node_url: str) -> None:
    body = echo_call("noop", {}).model_dump() | {"cmd": ["/bin/sh", "-c", "id"]}
    resp = _post(node_url, body)
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "code": "invalid_request",
        "message": "cmd: Value error, cmd[0] '/bin/sh' is not a path under /tool/",
    }


def test_a_ninth_call_at_once_is_503_node_busy_with_retry_after(node_url: str) -> None:
    slow = echo_call("fail", {"mode": "sleep", "seconds": 2}, timeout_ms=8_000).model_dump()
    sent = time.monotonic()
    answers: list[int] = []
    threads = [
        threading.Thread(target=lambda: answers.append(_post(node_url, slow).status_code)) for _ in range(8)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + PATIENCE_S
    while node_request("GET", f"{node_url}/v1/node/status").json()["slots_free"] > 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    resp = _post(node_url, echo_call("noop", {}).model_dump())
    waited = time.monotonic() - sent
    for t in threads:
        t.join()
    assert resp.status_code == 503
    # the whole seconds to the soonest deadline of the 8 running calls (8 s each, `waited` of it gone)
    assert math.ceil(8 - waited) <= int(resp.headers["Retry-After"]) <= 8
    assert resp.json()["error"] == {
        "code": "tool_unavailable",
        "reason": "node_busy",
        "message": "the node already runs 8 calls",
    }
    assert answers == [200] * 8
    assert _post(node_url, echo_call("noop", {}).model_dump()).json()["ok"] is True
