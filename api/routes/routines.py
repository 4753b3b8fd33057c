"""Routines of the caller's organization: store (validated, applying its `on:` schedules and triggers), read,
list, list its versions, and start a run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from api import server_timing
from api.accounts.scopes import ACTIONS_CALL, ROUTINES_READ, ROUTINES_RUN
from api.calls.idempotency import check_key
from api.db import in_thread
from api.deps import Principal, require
from api.errors import Forbidden, error_responses
from api.params import IdempotencyKey
from api.routines.models import (
    EstimateCreate,
    RoutineCreate,
    RoutineEstimate,
    RoutineList,
    RoutinePublic,
    RoutineVersionList,
)
from api.routines.tables import RoutineRecord
from api.runs.models import RunCreate, RunPublic
from api.services import EstimatesOf, PollsDep, Routines, Runs, Schedules, Starts, SubscriptionsDep
from engine.routine import Routine

router = APIRouter(prefix="/v1/routines", tags=["routines"])
Runner = Annotated[Principal, Depends(require(ROUTINES_RUN))]
Reader = Annotated[Principal, Depends(require(ROUTINES_READ))]


def _public(row: RoutineRecord) -> RoutinePublic:
    return RoutinePublic(
        name=row.name,
        version=row.version,
        description=row.description,
        steps=[step["id"] for step in row.routine.get("steps", [])],
        inputs=row.routine.get("inputs", {}),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.post("", status_code=201, response_model=RoutinePublic, responses=error_responses(400, 403, 413, 503))
async def store_routine(
    body: RoutineCreate,
    principal: Runner,
    routines: Routines,
    schedules: Schedules,
    triggers: SubscriptionsDep,
    polls: PollsDep,
) -> RoutinePublic:
    """Validate a routine's YAML and store it (a routine of the same name is replaced)."""

    def check(routine: Routine) -> None:
        if routine.schedules or routine.event_triggers:
            require_call_scope(principal, "a routine with on: schedule or a trigger")

    row = await routines.store_routine(org_id=principal.org_id, source=body.yaml, check=check)
    routine = Routine.model_validate(row.routine)
    # the schedules its file declares replace those it declared before (api.schedules.service)
    await schedules.apply_declared(org_id=principal.org_id, key_id=principal.key_id, routine=routine)
    # its triggers' subscriptions are kept, made or ended (api.triggers.subscriptions), and a poll's
    # Temporal Schedule with them (api.triggers.polls)
    applied = await in_thread(
        triggers.apply_declared, org_id=principal.org_id, key_id=principal.key_id, routine=routine
    )
    for sub in applied.ended:
        if sub.kind == "poll":
            await polls.unschedule(sub)
    for sub in applied.active:
        if sub.id in applied.every_s:
            await polls.schedule(sub, applied.every_s[sub.id])
    return _public(row)


@router.get("", response_model=RoutineList, responses=error_responses(403))
async def list_routines(principal: Reader, routines: Routines) -> RoutineList:
    """The organization's routines."""
    rows = await in_thread(routines.list_routines, org_id=principal.org_id)
    return RoutineList(routines=[_public(r) for r in rows])


@router.get("/{name}", response_model=RoutinePublic, responses=error_responses(403, 404))
async def get_routine(name: str, principal: Reader, routines: Routines) -> RoutinePublic:
    """One routine of the organization."""
    return _public(await in_thread(routines.get_routine, org_id=principal.org_id, name=name))


@router.get("/{name}/versions", response_model=RoutineVersionList, responses=error_responses(403, 404))
async def list_versions(name: str, principal: Reader, routines: Routines) -> RoutineVersionList:
    """Every stored version of a routine (by the sha256 of its YAML), newest first."""
    versions = await in_thread(routines.list_versions, org_id=principal.org_id, name=name)
    return RoutineVersionList(versions=versions)


def require_call_scope(principal: Principal, what: str) -> None:
    """Refuse a key without actions:call where runs would call actions for it."""
    if not principal.has(ACTIONS_CALL):
        raise Forbidden(
            f"This key lacks the scope {ACTIONS_CALL}, which {what} needs: its steps call actions for it.",
            missing_scope=ACTIONS_CALL,
        )


@router.post(
    "/{name}/runs",
    status_code=201,
    response_model=RunPublic,
    responses={
        200: {"model": RunPublic, "description": "the run this Idempotency-Key started before"},
        **error_responses(400, 403, 404, 413, 422, 429, 503),
    },
)
async def start_run(
    name: str,
    body: RunCreate,
    principal: Runner,
    starts: Starts,
    runs: Runs,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> RunPublic:
    """Start a run of a routine; the same Idempotency-Key gives the same run. The answer's
    `Server-Timing` says where the start's time went (api.runs.starts)."""
    require_call_scope(principal, "a run")
    if idempotency_key is not None:
        check_key(idempotency_key)
    phases = server_timing.begin()
    row, created = await starts.start_run(
        org_id=principal.org_id,
        key_id=principal.key_id,
        name=name,
        inputs=body.inputs,
        idempotency_key=idempotency_key,
        max_cost_microusd=body.max_cost_microusd,
    )
    response.headers["Server-Timing"] = server_timing.header(phases)
    if not created:
        response.status_code = 200
    return await runs.answer_start(row, created)


@router.post(
    "/{name}/estimate", response_model=RoutineEstimate, responses=error_responses(400, 403, 404, 413, 503)
)
async def estimate_run(
    name: str, body: EstimateCreate, principal: Reader, estimates: EstimatesOf
) -> RoutineEstimate:
    """The most a run can cost, per step and in all, in micro-USD (api.routines.ceiling)."""
    return await estimates.estimate(org_id=principal.org_id, name=name, inputs=body.inputs, yaml=body.yaml)
