"""`POST /v1/actions/call`: call an action (a hosted tool runs in a fresh VM on a node); cancel one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from api.calls.auth import caller_for, check_run_key
from api.calls.errors import BodyTooLarge
from api.calls.request import CallBody, Caller, CancelBody, parse_cancel
from api.calls.service import CallService
from api.db import run_reading
from api.errors import CallError, error_responses
from api.jsonbody import request_json
from api.params import IdempotencyKey
from api.services import services_of

router = APIRouter(prefix="/v1/actions", tags=["calls"])


async def http_caller(request: Request) -> Caller:
    """The key calling over HTTP (or a routine step, for the key that started its run)."""
    linked = await services_of(request.app.state).links.parent(request)
    return await run_reading(
        request.app.state.engine, lambda: caller_for(request, surface="http", linked=linked)
    )


async def http_canceller(request: Request) -> Caller:
    """The key cancelling a call over HTTP (or a routine step cancelling its own call)."""
    linked = await services_of(request.app.state).links.parent(request)
    return await run_reading(
        request.app.state.engine,
        lambda: caller_for(request, surface="http", cancelling=True, linked=linked),
    )


REPLAYED = {
    "Idempotent-Replayed": {
        "description": "true: the stored answer of an earlier request with this Idempotency-Key",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


class CallAnswer(BaseModel):
    """A call's answer: its output, what it cost in micro-USD and where its time went (milliseconds)."""

    call_id: str
    ref: str = Field(description="the exact pin that ran, ns/pack/action@1.0.0")
    tier: str = Field(description="vm or http")
    output: Any
    cost: dict[str, int] = Field(description="compute, floor, price and total, in micro-USD")
    timings: dict[str, float] = Field(description="each phase's milliseconds")


class Cancelled(BaseModel):
    """A cancel that reached a running call (202), or found it finished (200).

    `call_id` is null when the call ended before it reached a node.
    """

    call_id: str | None
    state: str = Field(description="cancelled or finished")
    node: str | None = Field(default=None, description="killed, not_started, unknown or unreachable")


CALL_STATUSES = error_responses(
    400, 403, 404, 409, 413, 422, 429, 502, 503, 504,
    notes={409: "idempotency_in_progress: a request with this Idempotency-Key still runs"},
    retry_after=(409, 429, 503),
)  # fmt: skip
CANCEL_STATUSES: dict[int | str, dict[str, Any]] = {
    200: {"model": Cancelled, "description": "the call had already finished"},
    202: {"model": Cancelled, "description": "the call's node was told to stop it"},
}


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON (checked by api.jsonbody), at most `limit` bytes, or the error at fault."""
    raw = await request.body()
    if len(raw) > limit:
        raise BodyTooLarge(
            f"the request body has {len(raw)} bytes, more than the {limit} bytes a call may send "
            "(files included)",
            details={"limit_bytes": limit},
        )
    return request_json(request, raw)


@router.post(
    "/call",
    responses={
        200: {"model": CallAnswer, "description": "the call's answer", "headers": REPLAYED},
        **CALL_STATUSES,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CallBody.model_json_schema()}},
        }
    },
)
async def call_action(
    request: Request, caller: Annotated[Caller, Depends(http_caller)], idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Call an action and answer its result: output, cost in micro-USD and timings."""
    service: CallService = request.app.state.calls
    payload = await read_json(request, service.settings.max_call_body_bytes)
    answer = await service.call(caller, payload, idempotency_key=idempotency_key)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


@router.post(
    "/call/cancel",
    responses={
        **CANCEL_STATUSES,
        **error_responses(
            400,
            403,
            404,
            409,
            413,
            notes={409: "conflict: the call has not reached a node yet"},
            retry_after=(409,),
        ),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CancelBody.model_json_schema()}},
        }
    },
)
async def cancel_call_by_key(
    request: Request, caller: Annotated[Caller, Depends(http_canceller)]
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
    check_run_key(caller, key)
    answer = await service.cancel(caller, key=key)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


@router.post("/calls/{call_id}/cancel", responses={**CANCEL_STATUSES, **error_responses(403, 404)})
async def cancel_call_by_id(
    call_id: str, request: Request, caller: Annotated[Caller, Depends(http_canceller)]
) -> JSONResponse:
    """Cancel a running call by its id (`tcall_...`): as `POST /v1/actions/call/cancel`."""
    check_run_key(caller, None)
    service: CallService = request.app.state.calls
    answer = await service.cancel(caller, call_id=call_id)
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)
