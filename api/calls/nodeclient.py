"""The api's side of `POST /v1/node/calls` (see docs/internals.md): send one call, read one result.

Every request is signed for the node it goes to (`node.credential`: the node's call key, its id, the
method, path, time and body), so a node runs only what the api sent it. Redirects are never followed,
and an answer (of any status) is believed only with that node's proof over that request and its body;
without it the call counts as not answered there (nothing billed), and the node as bad (`unproven`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from b3os import retry_after_seconds
from http1.client import ConnectFailed, Http1, Http1Error, TimedOut
from node.credential import PROOF_HEADER, answer_is_proven, signed_headers
from telemetry import tracing

NODE_CALLS_PATH = "/v1/node/calls"


@dataclass(frozen=True)
class NodeAnswer:
    """What a node said about a call, or why it said nothing.

    `status` is the node's HTTP status (0 when it could not be reached, did not answer in time, or
    answered without its proof). `elsewhere`: nothing the api can believe ran there (no connection, or
    an answer without the node's proof), so the call may go to another node.
    """

    status: int
    result: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None
    failure: str | None = None
    timed_out: bool = False
    gone: bool = False  # the connection was refused or dropped: the node may be down
    unproven: bool = False  # an answer without the node's proof
    elsewhere: bool = False


@dataclass(frozen=True)
class NodeTarget:
    """The node a request goes to: its URL, its id and its call key."""

    url: str
    node_id: str
    key: str

    def request(self, path: str, body: dict[str, Any] | None) -> tuple[str, bytes, dict[str, str]]:
        """The URL, body bytes and signed headers of one POST to this node."""
        content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = signed_headers(self.key, node_id=self.node_id, method="POST", path=path, body=content)
        if body is not None:
            headers["Content-Type"] = "application/json"
        return self.url.rstrip("/") + path, content, headers


async def send_call(client: Http1, *, node: NodeTarget, body: dict[str, Any], timeout_s: float) -> NodeAnswer:
    """Send one call to a node and wait for its result (at most `timeout_s`)."""
    url, content, headers = node.request(NODE_CALLS_PATH, body)
    tracing.inject(headers)  # W3C traceparent: the node's span joins the call's trace
    try:
        response = await client.post(
            url, content=content, headers=headers, timeout_s=timeout_s, connect_s=5.0
        )
    except ConnectFailed:
        return NodeAnswer(status=0, failure="the node could not be reached", gone=True, elsewhere=True)
    except TimedOut:
        return NodeAnswer(status=0, failure="the node did not answer in time", timed_out=True)
    except Http1Error as exc:
        return NodeAnswer(status=0, failure=f"the connection to the node failed: {exc}", gone=True)
    if not answer_is_proven(
        node.key,
        node_id=node.node_id,
        proof=headers[PROOF_HEADER],
        status=response.status_code,
        body=response.content,
        headers=response.headers,
    ):
        failure = f"the answer (HTTP {response.status_code}) did not carry the proof of node {node.node_id}"
        return NodeAnswer(status=0, failure=failure, unproven=True, elsewhere=True)
    try:
        result = response.json()
    except ValueError:
        result = None
    if not isinstance(result, dict):
        result = {}
    return NodeAnswer(
        status=response.status_code,
        result=result,
        retry_after=retry_after_seconds(response.headers.get("retry-after")),
    )


async def send_cancel(client: Http1, *, node: NodeTarget, call_id: str) -> str:
    """Ask a node to kill a call's VM; the node's state ("killed", "not_started", "unknown") or
    "unreachable" when it did not answer (or not with its proof)."""
    url, content, headers = node.request(f"{NODE_CALLS_PATH}/{call_id}/cancel", None)
    try:
        response = await client.post(url, content=content, headers=headers, timeout_s=5.0, connect_s=2.0)
        proven = answer_is_proven(
            node.key,
            node_id=node.node_id,
            proof=headers[PROOF_HEADER],
            status=response.status_code,
            body=response.content,
            headers=response.headers,
        )
        state = response.json().get("state") if response.status_code == 200 and proven else None
    except (Http1Error, ValueError, AttributeError):
        return "unreachable"
    return state if isinstance(state, str) else "unreachable"
