"""`/v1/mcp`: the actions as MCP tools, served by the official `mcp` server over Streamable HTTP.

The `mcp` package speaks the protocol (initialize, ping, tools/list, tools/call, protocol versions,
JSON-RPC errors); this module checks each HTTP request's API key and answers the two tool methods
from api.calls.mcp_tools through the call service, as the key's organization and on the surface `mcp`.
The server is stateless and answers JSON (no session, no server-initiated stream), so any replica
answers any request; GET and DELETE are 405.

A request without a valid key is refused before the protocol runs: 401 (403 for a key without
`actions:call`) with `WWW-Authenticate: Bearer` and a JSON-RPC error whose message is the api's
`code: sentence` and whose `data` is the api's error body. The official client raises that error
(an `MCPError` saying why) instead of its generic "Server returned an error response".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import mcp_types
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from sqlmodel import Session
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.calls import mcp_tools
from api.calls.auth import caller_for
from api.calls.request import Caller
from api.calls.service import CallService
from api.db import run_reading
from api.errors import ApiError, Forbidden, ServiceUnavailable, error_response

PATH = "/v1/mcp"
INSTRUCTIONS = "Each tool is an action of a b3os pack; hosted tools run in a fresh VM per call."


def _request(ctx: ServerRequestContext[Any, Any]) -> Request:
    request = ctx.request
    if not isinstance(request, Request):  # only the HTTP transport is mounted
        raise MCPError(mcp_types.INTERNAL_ERROR, "This server answers over HTTP only.")
    return request


async def _tools(request: Request) -> dict[str, mcp_tools.Tool]:
    def read() -> dict[str, mcp_tools.Tool]:
        with Session(request.app.state.engine) as session:
            return mcp_tools.tools(session)

    found: dict[str, mcp_tools.Tool] = await anyio.to_thread.run_sync(read)
    return found


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListToolsResult:
    """`tools/list`: every tool, in one page."""
    found = await _tools(_request(ctx))
    return mcp_types.ListToolsResult(tools=[t.describe() for t in found.values()])


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: mcp_types.CallToolRequestParams
) -> mcp_types.CallToolResult:
    """`tools/call`: one call through the call service; an unknown tool is a JSON-RPC -32602.

    Raises:
        MCPError: no tool has that name.
    """
    request = _request(ctx)
    tool = (await _tools(request)).get(params.name)
    if tool is None:
        raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name[:200]}")
    caller: Caller = request.state.caller
    service: CallService = request.app.state.calls
    payload = {"ref": tool.ref, "input": params.arguments if params.arguments is not None else {}}
    answer = await service.call(caller, payload, idempotency_key=request.headers.get("Idempotency-Key"))
    return mcp_tools.call_result(answer)


def server() -> Server[Any]:
    """The MCP server: the tool methods of this module (ping and the handshake are the library's)."""
    return Server(
        "b3os",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def refusal(request: Request, err: ApiError) -> Response:
    """An HTTP refusal the MCP client reads: the api's status and headers, a JSON-RPC error body."""
    headers = dict(err.headers)
    if err.status == 401:
        sent_key = bool(request.headers.get("authorization"))
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"' if sent_key else "Bearer"
    elif isinstance(err, Forbidden):
        scope = err.extra.get("missing_scope", "")
        headers["WWW-Authenticate"] = f'Bearer error="insufficient_scope", scope="{scope}"'
    error = {"code": mcp_types.INVALID_REQUEST, "message": f"{err.code}: {err.message}", "data": err.body()}
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return Response(json.dumps(body), status_code=err.status, headers=headers, media_type="application/json")


class Endpoint:
    """The ASGI app at `/v1/mcp`: the caller's key first, then the running session manager."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method != "POST":  # stateless: no stream to open (GET), no session to end (DELETE)
            sentence = "This endpoint takes POST only: it keeps no session and opens no stream."
            refused = ApiError(sentence, code="method_not_allowed", status=405, headers={"Allow": "POST"})
            await error_response(refused)(scope, receive, send)
            return
        try:
            caller = await run_reading(request.app.state.engine, partial(caller_for, request, surface="mcp"))
            manager: StreamableHTTPSessionManager | None = getattr(request.app.state, "mcp_sessions", None)
            if manager is None:
                raise ServiceUnavailable("The MCP server is not running yet.", retry_after_s=1)
        except ApiError as err:
            await refusal(request, err)(scope, receive, send)
            return
        request.state.caller = caller
        await manager.handle_request(scope, receive, send)


def install(app: FastAPI) -> None:
    """Mount the MCP endpoint at `/v1/mcp` and run its session manager in the app's lifespan."""
    mcp_server = server()
    body_limit = app.state.calls.settings.max_call_body_bytes
    app.router.routes.append(Route(PATH, endpoint=Endpoint(), name="mcp"))
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        # A manager runs once: a new one for each start of the app.
        manager = StreamableHTTPSessionManager(
            mcp_server, stateless=True, json_response=True, max_request_body_size=body_limit
        )
        async with outer(a) as state, manager.run():
            app.state.mcp_sessions = manager
            try:
                yield state
            finally:
                app.state.mcp_sessions = None

    app.router.lifespan_context = lifespan
