"""Runs of the caller's organization: read one (status, each step and its output or error), list, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from api.accounts.scopes import ROUTINES_READ, ROUTINES_RUN
from api.calls.idempotency import check_key
from api.deps import Principal, require
from api.errors import error_responses
from api.params import IdempotencyKey
from api.routes.routines import require_call_scope
from api.runs.models import CancelAccepted, RerunCreate, RunList, RunPublic
from api.runs.waiting import MAX_WAIT_S
from api.services import Runs, Starts

router = APIRouter(prefix="/v1/runs", tags=["runs"])
Runner = Annotated[Principal, Depends(require(ROUTINES_RUN))]
Reader = Annotated[Principal, Depends(require(ROUTINES_READ))]


@router.get("", response_model=RunList, responses=error_responses(400, 403, 503))
async def list_runs(
    principal: Reader,
    runs: Runs,
    routine: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> RunList:
    """The organization's newest runs, newest first."""
    return RunList(runs=await runs.list_runs(org_id=principal.org_id, routine=routine, limit=limit))


@router.get("/{run_id}", response_model=RunPublic, responses=error_responses(400, 403, 404, 503))
async def get_run(
    run_id: str,
    principal: Reader,
    runs: Runs,
    wait_s: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            description="While the run runs, answer when it has ended or after this many seconds, whichever "
            "comes first (default 0: at once). A client waiting for a run's end reads it once per wait "
            "instead of polling.",
        ),
    ] = 0,
) -> RunPublic:
    """A run: status, outputs, and each step's status, attempts, output or error."""
    return await runs.read_run(org_id=principal.org_id, run_id=run_id, wait_s=wait_s)


@router.post(
    "/{run_id}/cancel",
    status_code=202,
    response_model=CancelAccepted,
    responses=error_responses(403, 404, 409, 503, notes={409: "conflict: the run has already ended"}),
)
async def cancel_run(run_id: str, principal: Runner, runs: Runs) -> CancelAccepted:
    """Cancel a running run: its running steps are cancelled and it ends as cancelled."""
    row = await runs.cancel_run(org_id=principal.org_id, run_id=run_id)
    return CancelAccepted(run_id=row.id, status="cancelling")


@router.post(
    "/{run_id}/rerun",
    status_code=201,
    response_model=RunPublic,
    responses={
        200: {"model": RunPublic, "description": "the re-run this Idempotency-Key started before"},
        **error_responses(
            400,
            403,
            404,
            409,
            422,
            429,
            503,
            notes={409: "conflict: the run still runs, or has no failed step and no from was given"},
        ),
    },
)
async def rerun(
    run_id: str,
    principal: Runner,
    starts: Starts,
    runs: Runs,
    response: Response,
    body: RerunCreate | None = None,
    idempotency_key: IdempotencyKey = None,
) -> RunPublic:
    """Re-run an ended run from a step (default: its first failed step), keeping the steps before it."""
    require_call_scope(principal, "a re-run")
    if idempotency_key is not None:
        check_key(idempotency_key)
    row, created = await starts.rerun(
        org_id=principal.org_id,
        key_id=principal.key_id,
        run_id=run_id,
        from_step=body.from_ if body is not None else None,
        idempotency_key=idempotency_key,
    )
    if not created:
        response.status_code = 200
    return await runs.answer_start(row, created)
