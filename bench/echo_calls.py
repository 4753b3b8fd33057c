"""A call of the echo tool (examples/tools/echo) as the api sends it to a node: what the benches send
straight to a node (`bench.goals_calls`, `bench.api_floor`, `bench.temporal_floor`)."""

from __future__ import annotations

from typing import Any


def echo_tool_call(call_id: str, pack: str, action: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """The body of `POST /v1/node/calls` for an action of the echo tool (examples/tools/echo), as the api
    sends it (the benches' calls straight to a node)."""
    return {
        "call_id": call_id,
        "pack": pack,
        "version": "1.0.0",
        "action": action,
        "cmd": ["/tool/bin/echo-tool", action],
        "timeout_ms": 10_000,
        "input": tool_input,
    }
