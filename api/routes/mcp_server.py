"""The MCP server behind `/v1/mcp` (api.routes.mcp): the official `mcp` package speaks the protocol
(initialize, ping, tools/list, tools/call, protocol versions, JSON-RPC errors); this module answers the
two tool methods from api.calls.mcp_tools through the call service, as the key's organization (checked
by the mount before the protocol runs) and on the surface `mcp`. Stateless, JSON answers (no session, no
server-initiated stream), so any replica answers any request.

Imported on the first request to `/v1/mcp`, not with the api: the `mcp` package is a fifth of the
api's import time (~0.5 s of CPU at each start), and most api processes never serve MCP.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import mcp_types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from sqlmodel import Session
from starlette.requests import Request

from api.calls import mcp_tools
from api.calls.request import Caller
from api.calls.service import CallService

INSTRUCTIONS = "Each tool is an action of a b3os pack; hosted tools run in a fresh VM per call."


def _request(ctx: ServerRequestContext[Any, Any]) -> Request:
    request = ctx.request
    if not isinstance(request, Request):  # only the HTTP transport is mounted
        raise MCPError(mcp_types.INTERNAL_ERROR, "This server answers over HTTP only.")
    return request


async def _tools(request: Request, tool_map: mcp_tools.ToolMap) -> dict[str, mcp_tools.Tool]:
    def read() -> dict[str, mcp_tools.Tool]:
        with Session(request.app.state.engine) as session:
            return tool_map.tools(session)

    found: dict[str, mcp_tools.Tool] = await anyio.to_thread.run_sync(read)
    return found


async def list_tools(
    tool_map: mcp_tools.ToolMap,
    ctx: ServerRequestContext[Any, Any],
    params: mcp_types.PaginatedRequestParams | None,
) -> mcp_types.ListToolsResult:
    """`tools/list`: every tool, in one page."""
    found = await _tools(_request(ctx), tool_map)
    return mcp_types.ListToolsResult(tools=[t.describe() for t in found.values()])


async def call_tool(
    tool_map: mcp_tools.ToolMap, ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
) -> mcp_types.CallToolResult:
    """`tools/call`: one call through the call service; an unknown tool is a JSON-RPC -32602.

    Raises:
        MCPError: no tool has that name.
    """
    request = _request(ctx)
    tool = (await _tools(request, tool_map)).get(params.name)
    if tool is None:
        raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name[:200]}")
    caller: Caller = request.state.caller
    service: CallService = request.app.state.calls
    payload = {"ref": tool.ref, "input": params.arguments if params.arguments is not None else {}}
    answer = await service.call(caller, payload, idempotency_key=request.headers.get("Idempotency-Key"))
    return mcp_tools.call_result(answer)


def server() -> Server[Any]:
    """The MCP server: the tool methods of this module (ping and the handshake are the library's), over
    one tool map (each start of an app has its own server, on its own database)."""
    tool_map = mcp_tools.ToolMap()
    return Server(
        "b3os",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        on_list_tools=partial(list_tools, tool_map),
        on_call_tool=partial(call_tool, tool_map),
    )


def session_manager(body_limit: int) -> StreamableHTTPSessionManager:
    """The Streamable HTTP transport over `server()`: stateless, JSON answers; it serves once `run()`."""
    return StreamableHTTPSessionManager(
        server(), stateless=True, json_response=True, max_request_body_size=body_limit
    )
