"""Schedules of the caller's organization's routines (api.schedules.service), and the scheduled run start
that a schedule's tick asks for (worker token and schedule grant; not in the public API)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from api.accounts.scopes import ROUTINES_READ, ROUTINES_RUN
from api.calls.auth import is_worker_token
from api.calls.idempotency import check_key
from api.deps import Principal, bearer_token, require
from api.errors import Unauthorized, error_responses
from api.params import IdempotencyKey
from api.routes.routines import require_call_scope
from api.runs.models import RunPublic
from api.schedules.models import ScheduleCreate, ScheduleList, SchedulePublic
from api.schedules.service import GRANT_HEADER
from api.schedules.tick_check import EXECUTION_HEADER, TICK_HEADER
from api.services import Runs, Schedules

router = APIRouter(prefix="/v1/routines", tags=["schedules"])
ticks = APIRouter(prefix="/v1/schedules", tags=["schedules"], include_in_schema=False)
Runner = Annotated[Principal, Depends(require(ROUTINES_RUN))]
Reader = Annotated[Principal, Depends(require(ROUTINES_READ))]


@router.post(
    "/{name}/schedules",
    status_code=201,
    response_model=SchedulePublic,
    responses=error_responses(400, 403, 404, 503),
)
async def create_schedule(
    name: str, body: ScheduleCreate, principal: Runner, schedules: Schedules
) -> SchedulePublic:
    """Schedule runs of a routine (a Temporal Schedule); each run is started for this key."""
    require_call_scope(principal, "a schedule")
    return await schedules.create(org_id=principal.org_id, key_id=principal.key_id, name=name, body=body)


@router.get("/{name}/schedules", response_model=ScheduleList, responses=error_responses(403, 404))
async def list_schedules(name: str, principal: Reader, schedules: Schedules) -> ScheduleList:
    """The schedules of a routine, oldest first."""
    return ScheduleList(schedules=await schedules.list_schedules(org_id=principal.org_id, name=name))


@router.delete("/{name}/schedules/{schedule_id}", status_code=204, responses=error_responses(403, 404, 503))
async def delete_schedule(name: str, schedule_id: str, principal: Runner, schedules: Schedules) -> Response:
    """Delete a schedule: no run starts from it any more (runs already started go on)."""
    await schedules.delete(org_id=principal.org_id, name=name, schedule_id=schedule_id)
    return Response(status_code=204)


@router.post(
    "/{name}/schedules/{schedule_id}/pause",
    response_model=SchedulePublic,
    responses=error_responses(403, 404, 503),
)
async def pause_schedule(
    name: str, schedule_id: str, principal: Runner, schedules: Schedules
) -> SchedulePublic:
    """Pause a schedule: no run starts on its own until it is unpaused."""
    return await schedules.pause(org_id=principal.org_id, name=name, schedule_id=schedule_id, paused=True)


@router.post(
    "/{name}/schedules/{schedule_id}/unpause",
    response_model=SchedulePublic,
    responses=error_responses(403, 404, 503),
)
async def unpause_schedule(
    name: str, schedule_id: str, principal: Runner, schedules: Schedules
) -> SchedulePublic:
    """Unpause a schedule."""
    return await schedules.pause(org_id=principal.org_id, name=name, schedule_id=schedule_id, paused=False)


@router.post(
    "/{name}/schedules/{schedule_id}/trigger",
    status_code=202,
    response_model=SchedulePublic,
    responses=error_responses(403, 404, 503),
)
async def trigger_schedule(
    name: str, schedule_id: str, principal: Runner, schedules: Schedules
) -> SchedulePublic:
    """Fire a schedule now: a run starts at once (even while paused, or while another runs)."""
    require_call_scope(principal, "a triggered run")
    return await schedules.trigger(org_id=principal.org_id, name=name, schedule_id=schedule_id)


@ticks.post("/{schedule_id}/runs", status_code=201, response_model=RunPublic)
async def start_scheduled_run(
    schedule_id: str,
    request: Request,
    runs: Runs,
    schedules: Schedules,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> RunPublic:
    """Start the run a schedule's tick asks for (the worker token and the schedule's grant)."""
    if not is_worker_token(request.app.state.settings.worker_token, bearer_token(request)):
        raise Unauthorized("Only a routine worker starts a schedule's runs (the worker token and its grant).")
    secret = request.headers.get(GRANT_HEADER, "").strip()
    if not secret:
        raise Unauthorized(f"A schedule's run start sends the schedule's grant ({GRANT_HEADER}).")
    if idempotency_key is not None:
        check_key(idempotency_key)
    row, created = await schedules.start_scheduled_run(
        schedule_id=schedule_id,
        secret=secret,
        idempotency_key=idempotency_key,
        tick=request.headers.get(TICK_HEADER, "").strip(),
        execution=request.headers.get(EXECUTION_HEADER, "").strip(),
    )
    if not created:
        response.status_code = 200
    return await runs.answer_start(row, created)
