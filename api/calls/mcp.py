"""MCP: every action is a tool named `{pack}__{action}`, served as JSON-RPC over Streamable HTTP.

The endpoint is stateless: each POST carries one JSON-RPC message (or a batch) and gets its answer
as `application/json`; notifications get `202 Accepted`. Methods: `initialize`, `ping`,
`tools/list`, `tools/call` (anything else, including `server/discover`, is -32601, which makes a
newer client fall back to the `initialize` handshake). A tool call goes through the same call
service as `POST /v1/actions/call`: same limits, metering and errors. A failed call is a tool
result with `isError: true`, its text the error sentence and `_meta.b3os.error` the API's error
object (code, reason, retry_after, ...); the answer's output is `structuredContent`.

Tools come from the newest release of each pack; the ref called is `ns/pack/action@<major>`. When
two namespaces have packs of the same name, the tool name belongs to the first namespace in
alphabetical order and the other pack's actions are not listed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from api import registry
from api.calls.service import Answer
from api.models import PackVersion
from packs.manifest import Action
from packs.resolve import ResolveError

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SERVER_INFO = {"name": "b3os", "version": "0.1.0"}
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


@dataclass(frozen=True)
class Tool:
    """One action as an MCP tool."""

    name: str
    ref: str
    pin: str
    action: Action

    def describe(self) -> dict[str, Any]:
        """The tool as `tools/list` shows it."""
        tool: dict[str, Any] = {
            "name": self.name,
            "title": self.action.title,
            "description": self.action.description or self.action.title,
            "inputSchema": self.action.input_schema,
            "outputSchema": self.action.output_schema,
            "_meta": {"b3os/ref": self.ref, "b3os/pin": self.pin, "b3os/kind": self.action.impl.kind},
        }
        return tool


def tool_name(pack: str, action: str) -> str:
    """`com.example.tools/echo` + `echo` -> `echo__echo`."""
    return f"{pack.split('/', 1)[-1]}__{action}"


def tools(session: Session) -> dict[str, Tool]:
    """Every tool, by name, from the newest release of each pack (what `@<major>` resolves to)."""
    rows = session.exec(select(PackVersion).where(col(PackVersion.prerelease) == "")).all()
    newest: dict[str, PackVersion] = {}
    for v in rows:
        seen = newest.get(v.pack)
        if seen is None or (v.major, v.minor, v.patch) > (seen.major, seen.minor, seen.patch):
            newest[v.pack] = v
    found: dict[str, Tool] = {}
    for pack in sorted(newest):
        version = newest[pack]
        try:
            manifest = registry.typed(version)
        except ResolveError:
            continue  # a version this engine cannot run is not offered
        for action in manifest.actions:
            name = tool_name(pack, action.key)
            if name not in found:
                found[name] = Tool(
                    name=name,
                    ref=f"{pack}/{action.key}@{version.major}",
                    pin=f"{pack}/{action.key}@{version.version}",
                    action=action,
                )
    return found


def rpc_result(msg_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC success."""
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def rpc_error(msg_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    """The `initialize` answer: the client's protocol version when this server speaks it, else the newest."""
    asked = params.get("protocolVersion")
    version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": SERVER_INFO,
        "instructions": "Each tool is an action of a b3os pack; hosted tools run in a fresh VM per call.",
    }


def call_result(answer: Answer) -> dict[str, Any]:
    """A call's answer as an MCP tool result."""
    if answer.status == 200:
        output = answer.body.get("output")
        meta = {k: answer.body.get(k) for k in ("call_id", "ref", "cost", "timings")}
        return {
            "content": [{"type": "text", "text": json.dumps(output, separators=(",", ":"))}],
            "structuredContent": output,
            "isError": False,
            "_meta": {"b3os": meta},
        }
    error: dict[str, Any] = answer.body["error"] if isinstance(answer.body.get("error"), dict) else {}
    code = error.get("code", "error")
    reason = f" ({error['reason']})" if error.get("reason") else ""
    text = f"{code}{reason}: {error.get('message', 'the call failed')}"
    if "retry_after" in error:
        text += f" Retry after {error['retry_after']} s."
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"b3os": {"status": answer.status, "error": error}},
    }
