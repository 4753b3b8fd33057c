"""`POST /v1/actions/call`: call an action (a hosted tool runs in a fresh VM on a node); cancel one."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from api.calls.auth import caller_for
from api.calls.cancel import parse_cancel
from api.calls.errors import BodyTooLarge, CallError, CallInvalid
from api.calls.service import Caller, CallService

router = APIRouter(prefix="/v1/actions", tags=["calls"])


def http_caller(request: Request) -> Caller:
    """The key calling over HTTP (or the worker for one)."""
    return caller_for(request, surface="http")


class CallBody(BaseModel):
    """The request: an action ref, its input, and optionally the caller's time limit."""

    ref: str = Field(description="ns/pack/action@1 (newest 1.x.y installed) or @1.0.0 (exact)")
    input: dict[str, Any] = Field(default_factory=dict)
    timeout_ms: int | None = Field(default=None, ge=1)


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, at most `limit` bytes, or the error that names what is wrong."""
    raw = await request.body()
    if len(raw) > limit:
        raise BodyTooLarge(
            f"the request body has {len(raw)} bytes, more than the {limit} bytes a call may send "
            "(files included)",
            details={"limit_bytes": limit},
        )
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CallInvalid(f"The request body is not valid JSON ({exc}).", details={"field": "body"}) from None


@router.post(
    "/call",
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": CallBody.model_json_schema()}}}
    },
)
async def call_action(
    request: Request,
    caller: Annotated[Caller, Depends(http_caller)],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> JSONResponse:
    """Call an action and answer its result: output, cost in micro-USD and timings."""
    service: CallService = request.app.state.calls
    payload = await read_json(request, service.settings.max_call_body_bytes)
    answer = await service.call(caller, payload, idempotency_key=idempotency_key)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


class CancelBody(BaseModel):
    """Which call to cancel: the Idempotency-Key it was sent with."""

    idempotency_key: str = Field(description="the Idempotency-Key of the running call")


@router.post(
    "/call/cancel",
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": CancelBody.model_json_schema()}}}
    },
)
async def cancel_call_by_key(
    request: Request, caller: Annotated[Caller, Depends(http_caller)]
) -> JSONResponse:
    """Cancel the running call sent with this Idempotency-Key: its node kills its VM at once.

    202 `{"call_id", "state": "cancelled", "node"}`; 200 `{"state": "finished"}` when it had ended. The
    call's own request answers how it ended (a killed command: 502 tool_failed / signal), billed compute and
    the floor, never the price.
    """
    service: CallService = request.app.state.calls
    try:
        key = parse_cancel(await read_json(request, 4096))
    except CallError as exc:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
    answer = await service.cancel(caller, key=key)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


@router.post("/calls/{call_id}/cancel")
async def cancel_call_by_id(
    call_id: str, request: Request, caller: Annotated[Caller, Depends(http_caller)]
) -> JSONResponse:
    """Cancel a running call by its id (`tcall_...`): as `POST /v1/actions/call/cancel`."""
    service: CallService = request.app.state.calls
    answer = await service.cancel(caller, call_id=call_id)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)
