"""Reading runs: one run as it is now, the newest runs of an organization, and cancelling a run.

A finished run's result is kept in its row, so it is read without asking Temporal. A running run's status
and progress come from Temporal: its workflow's description, and its `progress` query (asked of its
worker only when its history has grown since this process last asked, `PROGRESS_KEPT`). A list of runs
takes the status of its unfinished ones from one Temporal visibility query (`B3osOrg` and their workflow
ids), whichever api process started them. A run's grant (api.runs.grants) ends when this process learns
the run ended (reading it), and starts no new call once the run is cancelled.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cachetools import LRUCache
from sqlalchemy import Engine
from sqlmodel import Session, col, select
from temporalio.client import (
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.exceptions import ApplicationError, TerminatedError
from temporalio.service import RPCError, RPCStatusCode

from api.db import in_thread, read_session
from api.errors import Conflict, NotFound, ServiceUnavailable
from api.models import utcnow
from api.runs import grants
from api.runs.models import RunError, RunPublic, RunSummary
from api.runs.progress import fill_outputs, note_retries
from api.runs.tables import RunRecord
from api.runs.waiting import Waits
from api.temporal import Temporal
from engine.runs import SEARCH_ATTRIBUTE_ORG, RunRoutineResult, StepResult

FINAL = frozenset({"succeeded", "failed", "cancelled"})
QUERY_TIMEOUT = timedelta(seconds=5)
PROGRESS_KEPT = 256
"""Running runs whose last `progress` answer an api process keeps (the least recently read go first; an
answer carries step outputs up to 512 KiB, so at most 128 MiB)."""

_STATUS = {  # a run's status from its workflow's; any other ending is a failure, as in refresh
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "succeeded",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


def quoted(value: str) -> str:
    """A string literal of a visibility query (ids never hold a quote; one would be dropped)."""
    return "'" + value.replace("'", "") + "'"


class RunReads:
    """Runs of every organization as they are now, over one database engine and one Temporal client."""

    def __init__(self, engine: Engine, temporal: Temporal) -> None:
        self._engine = engine
        self._temporal = temporal
        # per workflow id: (run id, history length) and the progress answered at that length
        self._progress: LRUCache[str, tuple[tuple[str, int], RunRoutineResult]] = LRUCache(PROGRESS_KEPT)
        self._waits = Waits()  # reads waiting for their run's end

    def get_run(self, org_id: str, run_id: str) -> RunRecord:
        """The organization's run as its row holds it, or NotFound."""
        with read_session(self._engine) as session:
            row = session.get(RunRecord, run_id)
        if row is None or row.org_id != org_id:
            raise NotFound(f"Your organization has no run {run_id[:100]}.", field="run_id")
        return row

    async def answer_start(self, row: RunRecord, created: bool) -> RunPublic:
        """The answer to a start: a run this request started as it started (every step pending), without
        asking its workflow's progress (a busy worker would hold the answer); the run an Idempotency-Key
        started before as it is now."""
        if created:
            return public(row)
        return await self.read_run(org_id=row.org_id, run_id=row.id)

    async def read_run(self, *, org_id: str, run_id: str, wait_s: float = 0) -> RunPublic:
        """A run as it is now: from its row once finished, else from Temporal (status and progress); a
        running run after it has ended or `wait_s` seconds have passed, whichever comes first
        (`api.runs.waiting`)."""
        row = await in_thread(self.get_run, org_id, run_id)
        if row.status not in FINAL:
            if wait_s > 0:
                await self._waits.until_closed(await self._temporal.client(), row.workflow_id, wait_s)
            await self.refresh(row)
        return public(row)

    async def list_runs(self, *, org_id: str, routine: str | None, limit: int) -> list[RunSummary]:
        """The organization's newest runs, newest first."""
        rows = await in_thread(self._list_rows, org_id, routine, limit)
        unfinished = {r.workflow_id: r for r in rows if r.status not in FINAL}
        if unfinished:
            for workflow_id, (status, closed_at) in (await self._visible(org_id, list(unfinished))).items():
                row = unfinished[workflow_id]
                row.status, row.finished_at = status, closed_at
        return [
            RunSummary(
                run_id=r.id,
                routine=r.routine_name,
                rerun_of=r.rerun_of,
                schedule_id=r.schedule_id,
                status=r.status,
                created_at=r.created_at,
                finished_at=r.finished_at,
            )
            for r in rows
        ]

    async def _visible(self, org_id: str, workflow_ids: list[str]) -> dict[str, tuple[str, datetime | None]]:
        """The status and close time of these runs of an organization, by workflow id, from one Temporal
        visibility query (eventually consistent: a run that has just started or ended may show late).

        Only GET /v1/runs/{id} saves a finished run's result into its row: a list stays one query.
        """
        client = await self._temporal.client()
        ids = ", ".join(quoted(w) for w in workflow_ids)
        query = f"{SEARCH_ATTRIBUTE_ORG} = {quoted(org_id)} AND WorkflowId IN ({ids})"
        newest: dict[str, WorkflowExecution] = {}
        try:
            async for execution in client.list_workflows(query, page_size=len(workflow_ids)):
                seen = newest.get(execution.id)
                if seen is None or execution.start_time > seen.start_time:
                    newest[execution.id] = execution
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not list the runs: {exc.message}", retry_after_s=5
            ) from exc
        return {
            workflow_id: (_STATUS.get(e.status, "failed") if e.status else "running", e.close_time)
            for workflow_id, e in newest.items()
        }

    def _list_rows(self, org_id: str, routine: str | None, limit: int) -> list[RunRecord]:
        with read_session(self._engine) as session:
            query = select(RunRecord).where(RunRecord.org_id == org_id)
            if routine:
                query = query.where(RunRecord.routine_name == routine)
            query = query.order_by(col(RunRecord.created_at).desc()).limit(limit)
            return list(session.exec(query).all())

    async def cancel_run(self, *, org_id: str, run_id: str) -> RunRecord:
        """Ask a running run to cancel: its running steps are cancelled and it ends as cancelled.

        Raises:
            Conflict: the run has already ended.
        """
        row = await in_thread(self.get_run, org_id, run_id)
        if row.status not in FINAL:  # asked of Temporal, not of a worker: a busy worker does not slow Ctrl-C
            client = await self._temporal.client()
            try:
                await client.get_workflow_handle(row.workflow_id).cancel()
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise ServiceUnavailable(
                        f"Temporal did not cancel the run: {exc.message}", retry_after_s=5
                    ) from exc
                await self.refresh(row)  # it had ended: its final state is saved and said
        if row.status in FINAL:
            raise Conflict(
                f"Run {run_id} has already ended ({row.status}).", field="run_id", status_now=row.status
            )
        await in_thread(self._mark_cancelled, row.id)
        return row

    def _mark_cancelled(self, run_id: str) -> None:
        with Session(self._engine) as session:
            grants.cancelled(session, run_id)
            session.commit()

    async def refresh(self, row: RunRecord) -> None:
        """Read a run's state from Temporal into `row`; a finished run's state is saved."""
        client = await self._temporal.client()
        handle = client.get_workflow_handle(row.workflow_id, result_type=RunRoutineResult)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:  # "Workflow is busy": answer what is known
                return
            raise ServiceUnavailable(
                f"Temporal did not describe the run: {exc.message}", retry_after_s=5
            ) from exc
        status = desc.status
        if status == WorkflowExecutionStatus.RUNNING:
            progress = await self._progress_of(handle, desc)
            note_retries(progress, desc, client.data_converter, utcnow())
            row.status, row.result = "running", progress.model_dump(mode="json")
            return
        if status == WorkflowExecutionStatus.COMPLETED:
            row.status, row.result = "succeeded", (await handle.result()).model_dump(mode="json")
        elif status == WorkflowExecutionStatus.FAILED:
            row.status = "failed"
            row.result, row.error = await _failure(handle)
        elif status == WorkflowExecutionStatus.CANCELED:
            result = await _progress(handle)
            result.status = "cancelled"
            row.status, row.result = "cancelled", result.model_dump(mode="json")
        else:
            what = status.name.lower() if status is not None else "ended"
            row.status = "failed"
            row.error = {
                "step": None,
                "code": what,
                "reason": None,
                "message": await _terminated_reason(handle) or f"the run was {what} in Temporal",
            }
            row.result = (await _progress(handle)).model_dump(mode="json")
        if row.result:
            try:
                await fill_outputs(row.result, handle, client.data_converter)
            except RPCError as exc:
                raise ServiceUnavailable(
                    f"Temporal did not give the run's history: {exc.message}", retry_after_s=5
                ) from exc
        row.finished_at = desc.close_time or utcnow()
        self._progress.pop(row.workflow_id, None)
        await in_thread(self._save_final, row)

    async def _progress_of(
        self, handle: WorkflowHandle[Any, RunRoutineResult], desc: WorkflowExecutionDescription
    ) -> RunRoutineResult:
        """The running run's `progress`, asked of its worker only when its history has grown since this
        process last asked: its state changes only in a workflow task, which adds events, so while a step's
        call runs (no new event) a poll costs a describe, not a query (a worker activation) as well. When
        no worker answers in time (its workers down, or busy with a backlog of workflow tasks), the last
        progress this process was told stands, rather than none."""
        seen = (desc.run_id, desc.history_length)
        kept = self._progress.get(desc.id)
        if kept is not None and kept[0] == seen:
            return kept[1].model_copy(deep=True)
        progress = await _progress(handle)
        if progress.steps:  # every step is listed, pending ones too: empty is no answer
            self._progress[desc.id] = (seen, progress.model_copy(deep=True))
        elif kept is not None:
            return kept[1].model_copy(deep=True)
        return progress

    def _save_final(self, row: RunRecord) -> None:
        with Session(self._engine) as session:
            stored = session.get(RunRecord, row.id)
            if stored is not None:
                stored.status, stored.result, stored.error = row.status, row.result, row.error
                stored.finished_at = row.finished_at
                session.add(stored)
            grants.end(session, row.id)
            session.commit()


async def _progress(handle: WorkflowHandle[Any, RunRoutineResult]) -> RunRoutineResult:
    """The `progress` query; an empty result when no worker answers in time."""
    try:
        return await handle.query("progress", result_type=RunRoutineResult, rpc_timeout=QUERY_TIMEOUT)
    except (TimeoutError, RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        # best effort: without a worker to answer, the status from Temporal stands alone
        return RunRoutineResult()


async def _failure(handle: WorkflowHandle[Any, RunRoutineResult]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run result and the error of a failed run, from its failure's details."""
    try:
        await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and len(cause.details) >= 2:
            error, result = cause.details[0], cause.details[1]
            if isinstance(error, dict) and isinstance(result, dict):
                return result, error
        message = str(cause or exc)
        result = (await _progress(handle)).model_dump(mode="json")
        return result, {"step": None, "code": "run_failed", "reason": None, "message": message}
    return (await _progress(handle)).model_dump(mode="json"), {}


async def _terminated_reason(handle: WorkflowHandle[Any, RunRoutineResult]) -> str:
    """Why a terminated run was ended, as the termination's reason said; empty for any other ending."""
    try:
        await handle.result()
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, TerminatedError):
            return str(exc.cause)
    return ""


def public(row: RunRecord) -> RunPublic:
    """A run as the api shows it."""
    result = RunRoutineResult.model_validate(row.result or {})
    steps: dict[str, StepResult] = dict(result.steps)
    return RunPublic(
        run_id=row.id,
        routine=row.routine_name,
        routine_version=row.routine_version,
        routine_hash=row.routine_hash,
        rerun_of=row.rerun_of,
        schedule_id=row.schedule_id,
        workflow_id=row.workflow_id,
        status=row.status,
        inputs=row.inputs,
        outputs=result.outputs,
        steps=steps,
        error=RunError.model_validate(row.error) if row.error else None,
        created_at=row.created_at,
        finished_at=row.finished_at,
        max_cost_microusd=row.max_cost_microusd,
    )
