"""MCP: what the tools are and what a call answers; the protocol: the `mcp` package (api.routes.mcp_server).

Every action is a tool named `{pack}__{action}` (`echo__echo`), and a name once given to a pack is never
given to another: the short names of a pack name belong to the pack of that name published first (packs
are never deleted). Every other pack of the same name, in another namespace, is named with its namespace
too, `{namespace}__{pack}__{action}` (`org.other__echo__echo`): names and actions have no "_" and no
".", so the two forms never meet. A tool call goes through the same call service as
`POST /v1/actions/call`: same limits, metering and errors. A failed call is a tool result with
`isError: true`, its text the error sentence and `_meta.b3os.error` the API's error object (code,
reason, retry_after, ...); a refused call (429, 503) always carries `retry_after` there, in seconds.
The answer's output is `structuredContent`.

Tools come from the newest release of each pack; the ref called is `ns/pack/action@<major>`. Each api
process keeps the tool map it built (`ToolMap`) until a version is published: versions and packs are
never changed nor deleted, so the registry's newest `seq` names the map (one indexed read per request,
not every version of every pack, as every `tools/call` read them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types
from sqlmodel import Session, col, func, select

from api.calls.answers import Answer
from api.models import Pack, PackVersion
from api.registry import catalog
from packs.manifest import Action
from packs.resolve import ResolveError


@dataclass(frozen=True)
class Tool:
    """One action as an MCP tool."""

    name: str
    ref: str
    pin: str
    action: Action

    def describe(self) -> mcp_types.Tool:
        """The tool as `tools/list` shows it."""
        return mcp_types.Tool(
            name=self.name,
            title=self.action.title,
            description=self.action.description or self.action.title,
            input_schema=self.action.input_schema,
            output_schema=self.action.output_schema,
            _meta={"b3os/ref": self.ref, "b3os/pin": self.pin, "b3os/kind": self.action.impl.kind},
        )


def tool_name(pack: str, action: str, *, qualified: bool = False) -> str:
    """`com.example.tools/echo` + `echo` -> `echo__echo`, or qualified `com.example.tools__echo__echo`."""
    namespace, _, name = pack.partition("/")
    return f"{namespace}__{name}__{action}" if qualified else f"{name}__{action}"


def _first_of_each_name(session: Session) -> set[str]:
    """The packs that own their name's short tool names: of the packs of each name, the first created."""
    owners: dict[str, str] = {}
    for pack in session.exec(select(Pack).order_by(col(Pack.created_at), col(Pack.id))):
        owners.setdefault(pack.id.partition("/")[2], pack.id)
    return set(owners.values())


def tools(session: Session) -> dict[str, Tool]:
    """Every tool, by name, from the newest release of each pack (what `@<major>` resolves to)."""
    newest = catalog.newest_of_each(session)
    owners = _first_of_each_name(session)
    found: dict[str, Tool] = {}
    for pack in sorted(newest):
        version = newest[pack]
        try:
            manifest = catalog.typed(version)
        except ResolveError:
            continue  # a version this engine cannot run is not offered
        for action in manifest.actions:
            name = tool_name(pack, action.key, qualified=pack not in owners)
            found[name] = Tool(
                name=name,
                ref=f"{pack}/{action.key}@{version.major}",
                pin=f"{pack}/{action.key}@{version.version}",
                action=action,
            )
    return found


_NEWEST_SEQ = select(func.max(PackVersion.seq))


class ToolMap:
    """The tools of one engine's registry, built again only once a version has been published since."""

    def __init__(self) -> None:
        self._built: tuple[int | None, dict[str, Tool]] | None = None  # (the newest seq, its tools)

    def tools(self, session: Session) -> dict[str, Tool]:
        """Every tool, by name (`tools`), as of the newest version published."""
        seq = session.exec(_NEWEST_SEQ).one()
        built = self._built
        if built is None or built[0] != seq:
            # read after `seq`: a version published meanwhile is in the map, and the next read builds it again
            built = self._built = (seq, tools(session))
        return built[1]


def call_result(answer: Answer) -> mcp_types.CallToolResult:
    """A call's answer as an MCP tool result."""
    return mcp_types.CallToolResult.model_validate(_result(answer))


def _result(answer: Answer) -> dict[str, Any]:
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
    if "retry_after" not in error and answer.headers.get("Retry-After", "").isdigit():
        error = {**error, "retry_after": int(answer.headers["Retry-After"])}
    if "retry_after" in error:
        text += f" Retry after {error['retry_after']} s."
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"b3os": {"status": answer.status, "error": error}},
    }
