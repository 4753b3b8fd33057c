"""`/v1/mcp`: the actions as MCP tools over Streamable HTTP (JSON-RPC; see api.calls.mcp)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse
from sqlmodel import Session

from api.calls import mcp
from api.calls.auth import caller_for
from api.calls.service import Caller, CallService

router = APIRouter(prefix="/v1", tags=["mcp"])


def mcp_caller(request: Request) -> Caller:
    """The key calling over MCP (or the worker for one)."""
    return caller_for(request, surface="mcp")


async def _tools(request: Request) -> dict[str, mcp.Tool]:
    def read() -> dict[str, mcp.Tool]:
        with Session(request.app.state.engine) as session:
            return mcp.tools(session)

    found: dict[str, mcp.Tool] = await anyio.to_thread.run_sync(read)
    return found


async def _handle(request: Request, caller: Caller, message: Any, key: str | None) -> dict[str, Any] | None:
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or not isinstance(message.get("method"), str)
    ):
        return mcp.rpc_error(None, mcp.INVALID_REQUEST, "not a JSON-RPC 2.0 request")
    method, msg_id = message["method"], message.get("id")
    params: dict[str, Any] = message["params"] if isinstance(message.get("params"), dict) else {}
    if "id" not in message:
        return None  # a notification: nothing to answer
    if method == "initialize":
        return mcp.rpc_result(msg_id, mcp.initialize_result(params))
    if method == "ping":
        return mcp.rpc_result(msg_id, {})
    if method == "tools/list":
        found = await _tools(request)
        return mcp.rpc_result(msg_id, {"tools": [t.describe() for t in found.values()]})
    if method == "tools/call":
        name = params.get("name")
        tool = (await _tools(request)).get(name) if isinstance(name, str) else None
        if tool is None:
            return mcp.rpc_error(msg_id, mcp.INVALID_PARAMS, f"Unknown tool: {str(name)[:200]}")
        arguments = params.get("arguments") if params.get("arguments") is not None else {}
        service: CallService = request.app.state.calls
        answer = await service.call(caller, {"ref": tool.ref, "input": arguments}, idempotency_key=key)
        return mcp.rpc_result(msg_id, mcp.call_result(answer))
    return mcp.rpc_error(msg_id, mcp.METHOD_NOT_FOUND, f"Method not found: {method[:200]}")


@router.post("/mcp")
async def mcp_post(
    request: Request,
    caller: Annotated[Caller, Depends(mcp_caller)],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response:
    """One MCP JSON-RPC message (or a batch); the answer comes back as JSON."""
    service: CallService = request.app.state.calls
    raw = await request.body()
    if len(raw) > service.settings.max_call_body_bytes:
        limit = service.settings.max_call_body_bytes
        message = f"the message has {len(raw)} bytes, more than {limit}"
        error = mcp.rpc_error(None, mcp.INVALID_REQUEST, message)
        return JSONResponse(error, status_code=413)
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return JSONResponse(mcp.rpc_error(None, mcp.PARSE_ERROR, "Parse error"), status_code=400)
    if isinstance(message, list):
        answers = [
            a for m in message if (a := await _handle(request, caller, m, idempotency_key)) is not None
        ]
        return JSONResponse(answers) if answers else Response(status_code=202)
    answer = await _handle(request, caller, message, idempotency_key)
    return JSONResponse(answer) if answer is not None else Response(status_code=202)


@router.get("/mcp")
async def mcp_get() -> Response:
    """No server-initiated stream: this server only answers requests."""
    return Response(status_code=405, headers={"Allow": "POST"})


@router.delete("/mcp")
async def mcp_delete() -> Response:
    """Sessions are not kept, so there is none to end."""
    return Response(status_code=405, headers={"Allow": "POST"})
