"""Nodes with their own identity, through the real api processes: forged heartbeats get no call, a revoked
node gets no call, and an answer is believed only with the proof of the node the call was placed on (no
redirect followed). A stand-in "node" records every request it receives."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import loopback
import pytest
from sqlmodel import Session, col, delete, select
from workers import PATIENCE_S

from api.accounts import node_credentials
from api.calls.tables import ActionCall
from api.models import Node
from node.credential import PROOF_HEADER, answer_proof, call_key

from .calltest import call, error
from .stack import ECHO, REPO, Stack

RESULT = {
    "ok": True,
    "ran": True,
    "output": {"text": "forged"},
    "usage": {"vcpu_ms": 1, "gib_ms": 1},
    "timings": {},
}


class StandIn:
    """An HTTP server that records what it receives and answers as `mode` says."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.mode, self.key, self.node_id, self.location = "lie", "", "", ""
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                stand_in.received.append((self.path, dict(self.headers), body))
                if stand_in.mode == "redirect":
                    self.send_response(307)
                    self.send_header("Location", stand_in.location + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(RESULT).encode()
                proof = answer_proof(
                    stand_in.key,
                    node_id=stand_in.node_id,
                    proof=self.headers[PROOF_HEADER],
                    status=200,
                    body=data,
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-B3os-Answer-Proof", proof)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


def _issue(stack: Stack, node_id: str) -> dict[str, str]:
    with Session(stack.engine) as session:
        _, secret = node_credentials.issue_credential(session, node_id=node_id)
        session.commit()
    return {"Authorization": f"Bearer {secret}"}


def _forget(stack: Stack, *node_ids: str) -> None:
    with Session(stack.engine) as session:
        for node_id in node_ids:
            node_credentials.revoke_credential(session, node_id=node_id)
        session.execute(delete(Node).where(col(Node.node_id).in_(node_ids)))
        session.commit()


def _beat(node_id: str, url: str) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "url": url,
        "slots_total": 64,
        "slots_free": 64,
        "installed": [f"{ECHO}@1.0.0"],
    }


def _altered(secret: str) -> str:
    return secret[:-1] + ("y" if secret[-1] != "y" else "z")


def _nodes_of(stack: Stack, org_id: str) -> list[str]:
    with Session(stack.engine) as session:
        stmt = select(ActionCall).where(col(ActionCall.org_id) == org_id).order_by(col(ActionCall.started_at))
        return [c.node_id for c in session.exec(stmt)]


def test_forged_heartbeats_are_refused_and_get_no_call(stack: Stack, stand_in: StandIn) -> None:
    with Session(stack.engine) as session:
        node_a = session.get(Node, "node-a")
        assert node_a is not None
        url_a = node_a.url
    evil = _issue(stack, "evil-node")
    try:
        refusals = [
            ({"Authorization": "Bearer b3n_" + "F" * 40}, _beat("evil-node", stand_in.url), 401, None),
            (
                {"Authorization": f"Bearer {_altered(stack.node_secret('node-a'))}"},
                _beat("node-a", stand_in.url),
                401,
                None,
            ),
            (evil, _beat("node-a", stand_in.url), 403, "node_id"),  # another node's id
            (evil, _beat("evil-node", "gopher://127.0.0.1:70/"), 400, "url"),
            (evil, _beat("evil-node", "http://user@127.0.0.1:70"), 400, "url"),
            (evil, _beat("evil-node", "http://93.184.216.34:80"), 400, "url"),  # outside the node networks
        ]
        for headers, beat, status, field in refusals:
            r = loopback.post(f"{stack.url}/v1/nodes/heartbeat", headers=headers, json=beat, timeout=10)
            assert r.status_code == status, r.text
            assert r.json()["error"].get("field") == field
        org = stack.org()
        for _ in range(3):
            r = call(stack, org, f"{ECHO}/echo@1", {"text": "secret input of another org"})
            assert r.status_code == 200 and r.json()["output"] == {"text": "secret input of another org"}
        assert stand_in.received == []
        assert set(_nodes_of(stack, org.org_id)) == {"node-a"}
        with Session(stack.engine) as session:
            assert session.get(Node, "evil-node") is None
            node_a = session.get(Node, "node-a")
            assert node_a is not None and node_a.url == url_a
    finally:
        _forget(stack, "evil-node")


def _set_bad(stack: Stack, node_id: str, until: dt.datetime | None) -> None:
    with Session(stack.engine) as session:
        node = session.get(Node, node_id)
        assert node is not None
        node.bad_until = until
        session.add(node)
        session.commit()


def _calls_of(stack: Stack, org_id: str) -> list[tuple[str, str | None, int]]:
    """Each call row of the organization, oldest first: its node, its error code and its total charge."""
    with Session(stack.engine) as session:
        stmt = select(ActionCall).where(col(ActionCall.org_id) == org_id).order_by(col(ActionCall.started_at))
        return [(c.node_id, c.code, c.total) for c in session.exec(stmt)]


def test_an_answer_without_the_proof_of_the_node_called_is_not_believed_and_the_call_goes_elsewhere(
    stack: Stack, stand_in: StandIn
) -> None:
    # node-0-liar holds a credential and says it has 64 free slots (node-a says 8), but what answers at
    # its URL signs with node-a's key
    liar = _issue(stack, "node-0-liar")
    secret = liar["Authorization"].removeprefix("Bearer ")
    stand_in.node_id, stand_in.key = "node-0-liar", call_key(stack.node_secret("node-a"))

    def beat() -> None:
        loopback.post(
            f"{stack.url}/v1/nodes/heartbeat",
            headers=liar,
            json=_beat("node-0-liar", stand_in.url),
            timeout=10,
        ).raise_for_status()

    try:
        beat()
        org = stack.org()
        # the liar draws the call, its answer is not believed, and the same request runs it on node-a
        r = call(stack, org, f"{ECHO}/echo@1", {"text": "hi"})
        assert r.status_code == 200 and r.json()["output"] == {"text": "hi"}, r.text
        ((path, headers, _),) = stand_in.received
        assert (path, headers["X-B3os-Node"]) == ("/v1/node/calls", "node-0-liar")
        (liars, error_code, charged), (honest, _, _) = _calls_of(stack, org.org_id)
        assert (liars, error_code, charged) == ("node-0-liar", "tool_unavailable", 0)
        assert honest == "node-a"
        # marked bad: though it heartbeats again, it gets no call
        beat()
        for _ in range(3):
            assert call(stack, org, f"{ECHO}/echo@1", {"text": "hi"}).status_code == 200
        assert len(stand_in.received) == 1
        # signed as node-a but for node-a (not the node called), or a redirect (not followed): the same
        for mode in ("lie", "redirect"):
            _set_bad(stack, "node-0-liar", None)
            stand_in.mode, stand_in.node_id, stand_in.location = mode, "node-a", stand_in.url
            r = call(stack, org, f"{ECHO}/echo@1", {"text": "hi"})
            assert r.status_code == 200 and r.json()["output"] == {"text": "hi"}, r.text
        assert len(stand_in.received) == 3
        # with no other node to go to, the call answers what happened, and nothing is billed
        _set_bad(stack, "node-0-liar", None)
        _set_bad(stack, "node-a", dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
        try:
            stand_in.mode = "lie"
            err = error(call(stack, org, f"{ECHO}/echo@1", {"text": "hi"}), 503, "tool_unavailable", "exec")
        finally:
            _set_bad(stack, "node-a", None)
        assert err["message"] == (
            "the answer (HTTP 200) did not carry the proof of node node-0-liar; nothing was billed"
        )
        assert err["cost"]["total"] == 0
        # the control: the same answer with the proof of the node called is believed
        _set_bad(stack, "node-0-liar", None)
        stand_in.node_id, stand_in.key = "node-0-liar", call_key(secret)
        r = call(stack, org, f"{ECHO}/echo@1", {"text": "hi"})
        assert r.status_code == 200 and r.json()["output"] == {"text": "forged"}
    finally:
        _forget(stack, "node-0-liar")


def test_a_heartbeat_cannot_claim_more_slots_than_a_node_runs(stack: Stack) -> None:
    headers = _issue(stack, "node-0-greedy")
    try:
        for total, free, problem in (
            (65, 1, "slots_total"),
            (8, 9, "slots_free (9) is more than slots_total (8)"),
        ):
            beat = {**_beat("node-0-greedy", "http://127.0.0.1:9"), "slots_total": total, "slots_free": free}
            r = loopback.post(f"{stack.url}/v1/nodes/heartbeat", headers=headers, json=beat, timeout=10)
            assert r.status_code == 400, r.text
            assert problem in r.text
        with Session(stack.engine) as session:
            assert session.get(Node, "node-0-greedy") is None
    finally:
        _forget(stack, "node-0-greedy")


def test_a_revoked_node_is_offered_no_call_and_its_heartbeats_are_refused(stack: Stack) -> None:
    node = stack.start_node("node-0-revoked")  # sorts before node-a: an idle tie would go to it
    try:
        stack.wait_installed("node-0-revoked", [f"{ECHO}@1.0.0"])
        org = stack.org()
        assert call(stack, org, f"{ECHO}/noop@1").status_code == 200
        assert _nodes_of(stack, org.org_id) == ["node-0-revoked"]
        revoke = subprocess.run(
            [sys.executable, "-m", "cli", "node", "credential", "revoke", "node-0-revoked"],
            env={**os.environ, "B3OS_DATABASE_URL": stack.db_url},
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        assert (revoke.returncode, revoke.stdout) == (
            0, "revoked the credential of node node-0-revoked: it is offered no more calls\n"
        )  # fmt: skip
        for _ in range(3):
            assert call(stack, org, f"{ECHO}/noop@1").status_code == 200
        assert _nodes_of(stack, org.org_id)[1:] == ["node-a"] * 3
        deadline = time.monotonic() + PATIENCE_S
        while b"401 Unauthorized" not in node.log.read_bytes():
            assert time.monotonic() < deadline, "the revoked node's heartbeat was not refused"
            time.sleep(0.1)
    finally:
        node.stop()
        stack.node_secrets.pop("node-0-revoked", None)
        _forget(stack, "node-0-revoked")
