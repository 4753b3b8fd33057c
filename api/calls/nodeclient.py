"""The api's side of `POST /v1/node/calls` (see docs/internals.md): send one call, read one result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from b3os import retry_after_seconds

NODE_CALLS_PATH = "/v1/node/calls"


@dataclass(frozen=True)
class NodeAnswer:
    """What a node said about a call, or why it said nothing.

    `status` is the node's HTTP status (0 when it could not be reached or did not answer in time).
    """

    status: int
    result: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None
    failure: str | None = None
    timed_out: bool = False


async def send_call(
    client: httpx.AsyncClient, *, url: str, token: str | None, body: dict[str, Any], timeout_s: float
) -> NodeAnswer:
    """Send one call to a node and wait for its result (at most `timeout_s`)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = await client.post(
            url.rstrip("/") + NODE_CALLS_PATH,
            json=body,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=5.0),
        )
    except httpx.ConnectError:
        return NodeAnswer(status=0, failure="the node could not be reached")
    except httpx.TimeoutException:
        return NodeAnswer(status=0, failure="the node did not answer in time", timed_out=True)
    except httpx.TransportError as exc:
        return NodeAnswer(status=0, failure=f"the connection to the node failed ({type(exc).__name__})")
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


async def send_cancel(client: httpx.AsyncClient, *, url: str, token: str | None, call_id: str) -> str:
    """Ask a node to kill a call's VM; the node's state ("killed", "not_started", "unknown") or
    "unreachable" when it did not answer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = await client.post(
            f"{url.rstrip('/')}{NODE_CALLS_PATH}/{call_id}/cancel",
            headers=headers,
            timeout=httpx.Timeout(5.0, connect=2.0),
        )
        state = response.json().get("state") if response.status_code == 200 else None
    except (httpx.TransportError, ValueError, AttributeError):
        return "unreachable"
    return state if isinstance(state, str) else "unreachable"
