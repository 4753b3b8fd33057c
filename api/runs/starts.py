"""Starting runs: a stored routine's current version, a re-run of an ended run, a schedule's run.

A run is one `routine` workflow with the id `routine-<name>-<run id>` on the routine workers' task
queue, started with the search attributes `B3osRoutine` and `B3osOrg` (and `B3osRerunOf` for a
re-run, `B3osSchedule` for a scheduled run). A run records the routine version it ran and its pins,
and a re-run (api.runs.rerun) runs that version again with the same inputs and pins. With an
Idempotency-Key the run id is derived from the organization and the key, so the same key gives the
same run (the same key with other inputs is refused).

Each run gets a grant when it starts (api.runs.grants): the only thing that lets its steps call
actions. The run lasts at most `run_timeout_s` (its Temporal execution timeout), and so does its
grant. A start is refused past the organization's limits (api.runs.limits).

Database work runs in worker threads; Temporal calls are awaited on the event loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from temporalio.common import (
    Priority,
    RawValue,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from api.accounts.organizations import new_id
from api.calls import idempotency
from api.calls.errors import IdempotencyKeyReused
from api.db import in_thread
from api.errors import Conflict, ServiceUnavailable
from api.routines.estimates import Estimates
from api.routines.store import RoutineStore
from api.runs.lanes import Lanes
from api.runs.launch import Launch, Launches, RunVersion, StartRequest
from api.runs.limits import TICK_RETRY_SPREAD_S, RunLimits, run_priority
from api.runs.reads import FINAL, RunReads
from api.runs.rerun import kept_steps, rerun_point
from api.runs.tables import RunRecord
from api.server_timing import phase
from api.temporal import Temporal
from engine.routine import Routine
from engine.runs import (
    SEARCH_ATTRIBUTE_ORG,
    SEARCH_ATTRIBUTE_RERUN_OF,
    SEARCH_ATTRIBUTE_ROUTINE,
    SEARCH_ATTRIBUTE_SCHEDULE,
    WORKFLOW_TYPE,
    RunRoutineResult,
    StepResult,
)

_ROUTINE = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ROUTINE)
_ORG = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ORG)
_RERUN_OF = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_RERUN_OF)
_SCHEDULE = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_SCHEDULE)


class RunStarts:
    """Starts the runs of every organization, over one database engine and one Temporal client."""

    def __init__(
        self,
        engine: Engine,
        temporal: Temporal,
        routines: RoutineStore,
        reads: RunReads,
        estimates: Estimates,
    ) -> None:
        settings = temporal.settings
        self._engine = engine
        self._temporal = temporal
        self._routines = routines
        self._reads = reads
        self.lanes = Lanes(settings.temporal_task_queue, settings.temporal_busy_task_queue)
        self._lasts = timedelta(seconds=settings.run_timeout_s)
        self.limits = RunLimits(
            engine, starts_per_minute=settings.run_starts_per_minute, runs_per_org=settings.runs_per_org
        )
        self._launches = Launches(engine, routines, self.limits, estimates, lasts=self._lasts)

    async def start_run(
        self,
        *,
        org_id: str,
        key_id: str,
        name: str,
        inputs: dict[str, Any],
        idempotency_key: str | None,
        max_cost_microusd: int | None = None,
    ) -> tuple[RunRecord, bool]:
        """Start a run of a stored routine; with an Idempotency-Key a repeat gives the same run. With
        `max_cost_microusd` the run starts only when its ceiling (api.routines.ceiling) is within it, and its
        steps' calls stop once they could take it past it (api.calls.limits).

        Returns:
            The run's row, and whether this request started it (False: the key's earlier run).

        Raises:
            NotFound: no such routine. InvalidRequest: the inputs do not fit or the key is malformed; the
                run's ceiling is above `max_cost_microusd`, or unbounded (`field: "max_cost_microusd"`).
            IdempotencyKeyReused: 422, the key was used with another request.
            ServiceUnavailable: Temporal is not reachable.
        """
        request: dict[str, Any] = {"routine": name, "inputs": inputs}
        if max_cost_microusd is not None:  # (absent: the request hash of a start before the max)
            request["max_cost_microusd"] = max_cost_microusd
        async with self.limits.turn(org_id):
            return await self.start(
                org_id=org_id,
                key_id=key_id,
                version=self.current(org_id, name, inputs),
                idempotency_key=idempotency_key,
                request=request,
                max_cost_microusd=max_cost_microusd,
            )

    def current(self, org_id: str, name: str, inputs: dict[str, Any]) -> Callable[[], RunVersion]:
        """The routine's current version with these inputs, read when the start is made ready (NotFound)."""

        def read() -> RunVersion:
            number, version = self._routines.current_version(org_id=org_id, name=name)
            return RunVersion(name, number, version, inputs)

        return read

    async def rerun(
        self, *, org_id: str, key_id: str, run_id: str, from_step: str | None, idempotency_key: str | None
    ) -> tuple[RunRecord, bool]:
        """Start a re-run of an ended run: the same routine version, inputs and pins, keeping the steps
        before the point (api.runs.rerun) and running the point and what follows it.

        Raises:
            NotFound: no such run in this organization. Conflict: it still runs, it has nothing to re-run
                from, or its routine version is gone. InvalidRequest: `from` names no step.
        """
        old = await in_thread(self._reads.get_run, org_id, run_id)
        if old.status not in FINAL:
            await self._reads.refresh(old)
        if old.status not in FINAL:
            raise Conflict(
                f"Run {run_id} is still running: re-run it once it has ended (or cancel it first).",
                field="run_id",
                status_now=old.status,
            )
        ran = await in_thread(
            self._routines.version_ran,
            org_id=old.org_id,
            name=old.routine_name,
            version=old.routine_hash,
            number=old.routine_version,
        )
        if ran is None:
            raise Conflict(
                f"Run {old.id} ran a version of routine {old.routine_name!r} that this api no longer has, so "
                "it cannot be re-run: start a new run.",
                field="run_id",
            )
        version, data = ran
        routine = Routine.model_validate(data)
        result = RunRoutineResult.model_validate(old.result or {})
        point = rerun_point(routine, result, old.id, from_step)
        same = RunVersion(old.routine_name, old.routine_version, version, old.inputs, routine, old.pins)
        return await self.start(
            org_id=org_id,
            key_id=key_id,
            version=lambda: same,
            idempotency_key=idempotency_key,
            request={"rerun": old.id, "from": point},
            reused=kept_steps(routine, result, point),
            rerun_of=old.id,
            event=old.event,
        )

    async def start(
        self,
        *,
        org_id: str,
        key_id: str,
        version: Callable[[], RunVersion],
        idempotency_key: str | None,
        request: dict[str, Any],
        reused: dict[str, StepResult] | None = None,
        rerun_of: str | None = None,
        schedule_id: str | None = None,
        event: dict[str, Any] | None = None,
        max_cost_microusd: int | None = None,
    ) -> tuple[RunRecord, bool]:
        """Start a run of one routine version (the one path of run starts, re-runs, scheduled runs and the
        runs of triggers, which give the `event`).

        Everything before Temporal is asked is done in one worker thread (api.runs.launch): each hop
        between the event loop and a thread waits for the interpreter's lock, which a busy process hands
        over slowly.
        """
        if idempotency_key is not None:
            idempotency.check_key(idempotency_key)
            run_id = "run_" + hashlib.sha256(f"{org_id}\n{idempotency_key}".encode()).hexdigest()[:20]
        else:
            run_id = new_id("run")
        with phase("ready"):
            launch = await in_thread(
                self._launches.ready,
                StartRequest(
                    org_id,
                    key_id,
                    run_id,
                    idempotency_key,
                    request,
                    reused or {},
                    rerun_of,
                    schedule_id,
                    event,
                    max_cost_microusd,
                ),
                version,
            )
        if isinstance(launch, RunRecord):  # the Idempotency-Key's earlier run (Temporal not asked)
            return _same_request(launch, request, idempotency_key or ""), False
        execution_id = await self._start_workflow(launch)
        with phase("insert"):
            stored, created = await in_thread(self._launches.insert_run, launch.row, execution_id)
        if not created:
            return _same_request(stored, request, idempotency_key or ""), False
        stored.result = _at_start(launch.routine).model_dump(mode="json")  # answered, not stored
        return stored, True

    async def _start_workflow(self, launch: Launch) -> str | None:
        """Start the run's workflow, at the priority and on the lane its organization's runs in flight give
        it (api.runs.lanes).

        Returns:
            The Temporal run id of the workflow started (None: the same idempotent run, already finished).

        Raises:
            ConcurrencyLimited: the organization runs its most runs at once. ServiceUnavailable: Temporal.
        """
        row = launch.row
        org = row.org_id
        started = False
        # the starts of this process not yet visible count too: a burst of starts sees itself
        with self.limits.starting(org) as starting:
            try:
                client = await self._temporal.client()
                with phase("count"):
                    spread_s = TICK_RETRY_SPREAD_S if row.schedule_id is not None else 0.0
                    running = await self.limits.check_running(client, org, spread_s=spread_s)
                priority = run_priority(running + starting)
                with phase("lane"):
                    queue = await self.lanes.queue(client, priority)
                with phase("temporal"):
                    handle = await client.start_workflow(
                        WORKFLOW_TYPE,
                        RawValue(launch.payload),
                        id=row.workflow_id,
                        task_queue=queue,
                        search_attributes=TypedSearchAttributes(_search_attributes(row)),
                        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                        execution_timeout=launch.lasts,
                        static_summary=f"{row.routine_name} · {row.id}",
                        priority=Priority(priority_key=priority),
                    )
                started = True
                self.limits.started(org)
                return handle.result_run_id
            except WorkflowAlreadyStartedError:
                return None  # the same idempotent run, already finished: its row is written next
            except RPCError as exc:
                raise ServiceUnavailable(
                    f"Temporal did not start the run: {exc.message}", retry_after_s=5
                ) from exc
            finally:
                if not started:  # a run that an earlier request started holds that request's grant
                    await in_thread(self._launches.forget_grant, launch.grant)


def _same_request(row: RunRecord, request: dict[str, Any], key: str) -> RunRecord:
    """The run of an Idempotency-Key when `request` is the one it started with, by the calls' own rule."""
    if row.request_hash != idempotency.request_hash(request):
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key[:100]!r} was already used for a different request (another routine or "
            "other inputs); use a new key for a new request",
            details={"field": "Idempotency-Key"},
        )
    return row


def _search_attributes(row: RunRecord) -> list[SearchAttributePair[str]]:
    pairs = [SearchAttributePair(_ROUTINE, row.routine_name), SearchAttributePair(_ORG, row.org_id)]
    if row.rerun_of:
        pairs.append(SearchAttributePair(_RERUN_OF, row.rerun_of))
    if row.schedule_id:
        pairs.append(SearchAttributePair(_SCHEDULE, row.schedule_id))
    return pairs


def _at_start(routine: Routine) -> RunRoutineResult:
    """A run's progress as its workflow begins it (engine.workflow: every step pending)."""
    return RunRoutineResult(steps={step.id: StepResult(name=step.name) for step in routine.steps})
