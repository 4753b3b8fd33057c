"""`/v1/mcp`: the actions as MCP tools, over Streamable HTTP (the server: api.routes.mcp_server).

This module mounts the endpoint. It checks each HTTP request's API key before the protocol runs: a
request without a valid key gets 401 (403 for a key without `actions:call`) with
`WWW-Authenticate: Bearer` and a JSON-RPC error whose message is the api's `code: sentence` and whose
`data` is the api's error body (the official client raises that error, an `MCPError` saying why,
instead of its generic "Server returned an error response"). GET and DELETE are 405: the server keeps
no session and opens no stream.

The server and the `mcp` package are imported and started on the first request that passes the key
check, inside the app's lifespan (a task of its task group), and stop with the app, before the call
service closes.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.calls.auth import caller_for
from api.db import run_reading
from api.errors import ApiError, Forbidden, ServiceUnavailable, error_response

PATH = "/v1/mcp"
INVALID_REQUEST = -32600  # JSON-RPC's code for a request the server will not take


def refusal(request: Request, err: ApiError) -> Response:
    """An HTTP refusal the MCP client reads: the api's status and headers, a JSON-RPC error body."""
    headers = dict(err.headers)
    if err.status == 401:
        sent_key = bool(request.headers.get("authorization"))
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"' if sent_key else "Bearer"
    elif isinstance(err, Forbidden):
        scope = err.extra.get("missing_scope", "")
        headers["WWW-Authenticate"] = f'Bearer error="insufficient_scope", scope="{scope}"'
    error = {"code": INVALID_REQUEST, "message": f"{err.code}: {err.message}", "data": err.body()}
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return Response(json.dumps(body), status_code=err.status, headers=headers, media_type="application/json")


class _Server:
    """The MCP session manager of one start of the app, started on first use in the lifespan's tasks."""

    def __init__(self, tasks: TaskGroup, body_limit: int) -> None:
        self._tasks = tasks
        self._body_limit = body_limit
        self._lock = anyio.Lock()
        self._manager: Any = None

    async def manager(self) -> Any:
        async with self._lock:
            if self._manager is None:
                self._manager = await self._tasks.start(self._serve)
        return self._manager

    async def _serve(self, *, task_status: TaskStatus[Any]) -> None:
        # in a thread: the import (~0.5 s) must not hold the event loop (see the module's docstring)
        protocol = await anyio.to_thread.run_sync(importlib.import_module, "api.routes.mcp_server")
        manager = protocol.session_manager(self._body_limit)
        async with manager.run():
            task_status.started(manager)
            await anyio.sleep_forever()


class Endpoint:
    """The ASGI app at `/v1/mcp`: the caller's key first, then the session manager."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method != "POST":  # stateless: no stream to open (GET), no session to end (DELETE)
            sentence = "This endpoint takes POST only: it keeps no session and opens no stream."
            refused = ApiError(sentence, code="method_not_allowed", status=405, headers={"Allow": "POST"})
            await error_response(refused)(scope, receive, send)
            return
        try:
            caller = await run_reading(request.app.state.engine, partial(caller_for, request, surface="mcp"))
            server: _Server | None = getattr(request.app.state, "mcp_server", None)
            if server is None:
                raise ServiceUnavailable("The MCP server is not running yet.", retry_after_s=1)
        except ApiError as err:
            await refusal(request, err)(scope, receive, send)
            return
        request.state.caller = caller
        manager = await server.manager()
        await manager.handle_request(scope, receive, send)


def install(app: FastAPI) -> None:
    """Mount the MCP endpoint at `/v1/mcp`; its server runs within the app's lifespan once asked."""
    body_limit = app.state.calls.settings.max_call_body_bytes
    app.router.routes.append(Route(PATH, endpoint=Endpoint(), name="mcp"))
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with outer(a) as state, anyio.create_task_group() as tasks:
            app.state.mcp_server = _Server(tasks, body_limit)
            try:
                yield state
            finally:
                app.state.mcp_server = None
                tasks.cancel_scope.cancel()

    app.router.lifespan_context = lifespan
