"""Schedules of routines, on Temporal Schedules: create, list, pause, unpause, trigger, delete, and the
scheduled run start.

A schedule is a row of `routine_schedules` and a Temporal Schedule `routine-schedule-<routine>-<id>` (the
Temporal UI's Schedules page lists it by that id, so it names the routine; one made before revision 0012
keeps `routine-schedule-<id>`: the row's `temporal_id`) whose cron spec, timezone and overlap policy are
the schedule's. Its
action starts the `routine-schedule-tick` workflow (engine.schedule_workflow) with the schedule's id
and its **schedule grant**: a random secret (`b3sch_` + 43 url-safe characters) minted when the
schedule is created, of which only the sha256 is kept. The tick's activity sends the grant with the
worker token to `POST /v1/schedules/{id}/runs` (not in the public API); the api then starts an
ordinary run of the routine's current version, with the schedule's inputs, for the key that created
the schedule (refused once that key is revoked or lacks actions:call), through the same path as
`POST /v1/routines/{name}/runs`: its own run grant, idempotency keys, limits and charges. Deleting the
schedule deletes its row (so its grant starts nothing more) and its Temporal Schedule.

A routine file's `on: {schedule: [...]}` is applied when the routine is stored: the schedules the file
declared before are deleted, and those it declares now created (schedules created over the api stay).
"""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta
from typing import Any

from sqlmodel import Session, col, select
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import Priority, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from api.accounts.organizations import hash_secret, new_id
from api.accounts.scopes import ACTIONS_CALL
from api.accounts.scopes import grants as scope_grants
from api.db import in_thread
from api.errors import Forbidden, InvalidRequest, NotFound, ServiceUnavailable, Unauthorized
from api.models import ApiKey
from api.routines.store import RoutineStore
from api.routines.tables import RoutineRecord
from api.runs.limits import TICK_RETRY_SPREAD_S
from api.runs.starts import RunStarts
from api.runs.tables import RunRecord
from api.schedules.models import ScheduleCreate, SchedulePublic
from api.schedules.tables import RoutineSchedule
from api.schedules.tick_check import check_tick
from api.temporal import Temporal
from engine.cron import ScheduleError, check_cron, check_timezone
from engine.routine import SCHEDULES_PER_ROUTINE, Routine
from engine.run_inputs import RoutineInputError, resolve_inputs
from engine.runs import SEARCH_ATTRIBUTE_ROUTINE, SEARCH_ATTRIBUTE_SCHEDULE
from engine.ticks import SCHEDULE_WORKFLOW_TYPE, ScheduleTickInput, temporal_schedule_id

GRANT_HEADER = "X-B3OS-Schedule-Grant"
GRANT_PREFIX = "b3sch_"
OVERLAP = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
TICK_SLACK = timedelta(hours=1)  # a tick waits for its run, which lasts at most run_timeout_s
TICK_PRIORITY = 5
"""The Temporal priority key of a schedule's tick workflows: last, and on the busy lane when a worker polls it
(api.runs.lanes). A tick only asks the api for the run, which starts at its organization's priority
(api.runs.limits.run_priority); 300 schedules of one minute otherwise put ~10 tick tasks a second at the
default 3 ahead of a quiet organization's run at 1-2."""


class SchedulesService:
    """The schedules of every organization, over one database engine and one Temporal client."""

    def __init__(self, temporal: Temporal, routines: RoutineStore, starts: RunStarts) -> None:
        self._temporal = temporal
        self._routines = routines
        self._starts = starts
        self._engine = routines.engine

    # --- create, list, delete -----------------------------------------------------------------

    async def create(
        self, *, org_id: str, key_id: str, name: str, body: ScheduleCreate, declared: bool = False
    ) -> SchedulePublic:
        """Create a schedule of the organization's routine and its Temporal Schedule.

        Raises:
            NotFound: no such routine. InvalidRequest: the cron, timezone or inputs (field named), or the
                routine has SCHEDULES_PER_ROUTINE schedules already.
        """
        record: RoutineRecord = await in_thread(self._routines.get_routine, org_id=org_id, name=name)
        # in a worker thread: the inputs' schemas are checked against the body's inputs (CPU work)
        row = await in_thread(lambda: check_schedule(Routine.model_validate(record.routine), body))
        row.org_id, row.routine_name, row.key_id, row.declared = org_id, name, key_id, declared
        row.temporal_id = temporal_schedule_id(row.id, name)
        secret = GRANT_PREFIX + secrets.token_urlsafe(32)
        row.grant_hash = hash_secret(secret)
        await in_thread(self._insert, row)
        try:
            await self._create_temporal(row, secret)
        except BaseException:
            await in_thread(self._delete_row, row.id)
            raise
        return await self._public(row)

    def _insert(self, row: RoutineSchedule) -> None:
        with Session(self._engine) as session:
            count = len(
                session.exec(
                    select(RoutineSchedule.id).where(
                        RoutineSchedule.org_id == row.org_id, RoutineSchedule.routine_name == row.routine_name
                    )
                ).all()
            )
            if count >= SCHEDULES_PER_ROUTINE:
                raise InvalidRequest(
                    f"Routine {row.routine_name!r} has {count} schedules, the most a routine may have "
                    f"({SCHEDULES_PER_ROUTINE}): delete one first.",
                    field="cron",
                )
            session.add(row)
            session.commit()
            session.refresh(row)

    def _delete_row(self, schedule_id: str) -> None:
        with Session(self._engine) as session:
            row = session.get(RoutineSchedule, schedule_id)
            if row is not None:
                session.delete(row)
                session.commit()

    async def _create_temporal(self, row: RoutineSchedule, secret: str) -> None:
        client = await self._temporal.client()
        settings = self._temporal.settings
        action = ScheduleActionStartWorkflow(
            SCHEDULE_WORKFLOW_TYPE,
            ScheduleTickInput(schedule_id=row.id, routine=row.routine_name, grant=secret),
            id=f"routine-tick-{row.id}",
            task_queue=await self._starts.lanes.queue(client, TICK_PRIORITY),  # the busy lane, when served
            execution_timeout=timedelta(seconds=settings.run_timeout_s) + TICK_SLACK,
            priority=Priority(priority_key=TICK_PRIORITY),
            typed_search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ROUTINE), row.routine_name
                    ),
                    SearchAttributePair(SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_SCHEDULE), row.id),
                ]
            ),
        )
        schedule = Schedule(
            action=action,
            spec=ScheduleSpec(
                cron_expressions=[row.cron],
                time_zone_name=row.timezone,
                jitter=timedelta(seconds=settings.schedule_jitter_s) if settings.schedule_jitter_s else None,
            ),
            policy=SchedulePolicy(overlap=OVERLAP[row.overlap]),
            state=ScheduleState(note=f"routine {row.routine_name} of {row.org_id}", paused=row.paused),
        )
        try:
            await client.create_schedule(row.temporal_schedule_id, schedule)
        except ScheduleAlreadyRunningError:
            pass
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT:  # what engine.cron did not foresee
                raise InvalidRequest(f"Temporal refuses the schedule: {exc.message}", field="cron") from exc
            raise ServiceUnavailable(
                f"Temporal did not create the schedule: {exc.message}", retry_after_s=5
            ) from exc

    async def list_schedules(self, *, org_id: str, name: str) -> list[SchedulePublic]:
        """The schedules of the organization's routine, oldest first (NotFound: no such routine)."""
        await in_thread(self._routines.get_routine, org_id=org_id, name=name)
        rows: list[RoutineSchedule] = await in_thread(self._rows, org_id, name)
        return [await self._public(row) for row in rows]

    def _rows(self, org_id: str, name: str, *, declared: bool | None = None) -> list[RoutineSchedule]:
        with Session(self._engine) as session:
            query = select(RoutineSchedule).where(
                RoutineSchedule.org_id == org_id, RoutineSchedule.routine_name == name
            )
            if declared is not None:
                query = query.where(RoutineSchedule.declared == declared)
            return list(session.exec(query.order_by(col(RoutineSchedule.created_at))).all())

    def _get(self, org_id: str, name: str, schedule_id: str) -> RoutineSchedule:
        with Session(self._engine) as session:
            row = session.get(RoutineSchedule, schedule_id)
        if row is None or row.org_id != org_id or row.routine_name != name:
            raise NotFound(
                f"Routine {name[:100]!r} of your organization has no schedule {schedule_id[:100]}.",
                field="schedule_id",
            )
        return row

    async def delete(self, *, org_id: str, name: str, schedule_id: str) -> None:
        """Delete a schedule: its row (its grant starts nothing more), then its Temporal Schedule."""
        row: RoutineSchedule = await in_thread(self._get, org_id, name, schedule_id)
        await in_thread(self._delete_row, row.id)
        await self._delete_temporal(row)

    async def _delete_temporal(self, row: RoutineSchedule) -> None:
        client = await self._temporal.client()
        try:
            await client.get_schedule_handle(row.temporal_schedule_id).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise ServiceUnavailable(
                    f"Temporal did not delete the schedule: {exc.message}", retry_after_s=5
                ) from exc

    async def apply_declared(self, *, org_id: str, key_id: str, routine: Routine) -> list[SchedulePublic]:
        """Replace the schedules a routine's file declares (`on: schedule`) by those it declares now."""
        old: list[RoutineSchedule] = await in_thread(self._rows, org_id, routine.name, declared=True)
        for row in old:
            await in_thread(self._delete_row, row.id)
            await self._delete_temporal(row)
        created = []
        for trigger in routine.schedules:
            body = ScheduleCreate.model_validate(trigger.model_dump())
            created.append(
                await self.create(org_id=org_id, key_id=key_id, name=routine.name, body=body, declared=True)
            )
        return created

    # --- pause, unpause, trigger ---------------------------------------------------------------

    async def pause(self, *, org_id: str, name: str, schedule_id: str, paused: bool) -> SchedulePublic:
        """Pause (no run starts on its own) or unpause a schedule."""
        row: RoutineSchedule = await in_thread(self._get, org_id, name, schedule_id)
        handle = await self._handle(row)
        try:
            if paused:
                await handle.pause(note="paused over the b3os api")
            else:
                await handle.unpause(note="unpaused over the b3os api")
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not change the schedule: {exc.message}", retry_after_s=5
            ) from exc
        await in_thread(self._set_paused, row.id, paused)
        row.paused = paused
        return await self._public(row)

    def _set_paused(self, schedule_id: str, paused: bool) -> None:
        with Session(self._engine) as session:
            row = session.get(RoutineSchedule, schedule_id)
            if row is not None:
                row.paused = paused
                session.add(row)
                session.commit()

    async def trigger(self, *, org_id: str, name: str, schedule_id: str) -> SchedulePublic:
        """Fire the schedule now (a run starts even while another runs, and while it is paused)."""
        row: RoutineSchedule = await in_thread(self._get, org_id, name, schedule_id)
        handle = await self._handle(row)
        try:
            await handle.trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not trigger the schedule: {exc.message}", retry_after_s=5
            ) from exc
        return await self._public(row)

    async def _handle(self, row: RoutineSchedule) -> ScheduleHandle:
        return (await self._temporal.client()).get_schedule_handle(row.temporal_schedule_id)

    async def _public(self, row: RoutineSchedule) -> SchedulePublic:
        """The schedule as the api shows it, with its next times from Temporal (none when unreachable)."""
        next_runs: list[Any] = []
        try:
            described = await (await self._handle(row)).describe()
            next_runs = list(described.info.next_action_times[:3])
        except (RPCError, ServiceUnavailable):
            pass
        return SchedulePublic(
            id=row.id,
            routine=row.routine_name,
            cron=row.cron,
            timezone=row.timezone,
            inputs=row.inputs,
            overlap=row.overlap,  # type: ignore[arg-type]
            paused=row.paused,
            declared=row.declared,
            temporal_schedule_id=row.temporal_schedule_id,
            next_runs=next_runs,
            created_at=row.created_at,
        )

    # --- the scheduled run start (the tick's activity) ----------------------------------------

    async def start_scheduled_run(
        self, *, schedule_id: str, secret: str, idempotency_key: str | None, tick: str, execution: str
    ) -> tuple[RunRecord, bool]:
        """Start the run a schedule's tick asks for: an ordinary run of the routine's current version.

        Args:
            tick: The tick's workflow id; `execution` its Temporal run id (api.schedules.tick_check).

        Raises:
            Unauthorized: the grant is not this schedule's (or the schedule was deleted).
            Forbidden: the key that created the schedule was revoked or lacks actions:call; the schedule
                did not start that tick.
        """
        row, key = await in_thread(self._granted, schedule_id, secret)
        # a full organization's ticks cost little
        self._starts.limits.check_known_running(row.org_id, spread_s=TICK_RETRY_SPREAD_S)
        await check_tick(await self._temporal.client(), row.id, row.temporal_schedule_id, tick, execution)
        if key is None or key.revoked_at is not None or not scope_grants(key.scopes, ACTIONS_CALL):
            raise Forbidden(
                f"The key that created schedule {row.id} was revoked or lacks {ACTIONS_CALL}: its runs are "
                "refused; create the schedule again with a key that may run routines.",
                reason="schedule_key_revoked",
            )
        return await self._starts.start(
            org_id=row.org_id,
            key_id=row.key_id,
            version=self._starts.current(row.org_id, row.routine_name, row.inputs),
            idempotency_key=idempotency_key,
            request={"schedule": row.id, "inputs": row.inputs},
            schedule_id=row.id,
        )

    def _granted(self, schedule_id: str, secret: str) -> tuple[RoutineSchedule, ApiKey | None]:
        with Session(self._engine) as session:
            row = session.get(RoutineSchedule, schedule_id)
            if row is None or not hmac.compare_digest(row.grant_hash, hash_secret(secret)):
                raise Unauthorized(
                    f"{GRANT_HEADER} is not the grant of schedule {schedule_id[:100]} (or it was deleted): "
                    "no run starts."
                )
            return row, session.get(ApiKey, row.key_id)


def check_schedule(routine: Routine, body: ScheduleCreate) -> RoutineSchedule:
    """A new schedule's row (id set, owner fields empty) when the cron, timezone and inputs are good.

    Raises:
        InvalidRequest: naming `cron`, `timezone` or `inputs` and the value.
    """
    try:
        cron = check_cron(body.cron)
        timezone = check_timezone(body.timezone)
    except ScheduleError as exc:
        raise InvalidRequest(f"{exc.message}.", field=exc.field) from None
    try:
        resolve_inputs(routine, body.inputs)
    except RoutineInputError as exc:
        raise InvalidRequest(
            f"The inputs do not fit routine {routine.name!r}: {exc}", field="inputs", problems=exc.problems
        ) from None
    return RoutineSchedule(
        id=new_id("sch"),
        org_id="",
        routine_name="",
        key_id="",
        cron=cron,
        timezone=timezone,
        inputs=body.inputs,
        overlap=body.overlap,
        grant_hash="",
    )
