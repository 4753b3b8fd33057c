"""The runs service: stores routines, starts runs as Temporal workflows, reads, lists and cancels them.

A run is one `routine` workflow with the id `routine-<name>-<run id>` on the routine workers' task
queue, started with the search attributes `B3osRoutine` and `B3osOrg` (and `B3osRerunOf` for a
re-run, `B3osSchedule` for a scheduled run). Storing a routine keeps each version (by the sha256 of
its YAML) in `routine_versions`; a run records the version it ran and its pins, and a re-run
(api.runs.rerun) runs that version again with the same inputs and pins. With an Idempotency-Key
the run id is derived from the organization and the key, so the same key gives the same run (the
same key with other inputs is refused). A finished run's result is kept in its row. A list of runs
takes the status of its unfinished ones from one Temporal visibility query (`B3osOrg` and their
workflow ids), whichever api process started them.

Each run gets a grant when it starts (api.runs.grants): the only thing that lets its steps call
actions. The run lasts at most `run_timeout_s` (its Temporal execution timeout), and so does its
grant; the grant ends earlier when this service learns the run ended (reading it, or refusing to
cancel it), and starts no new call once the run is cancelled.

Database work runs in worker threads; Temporal calls are awaited on the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from anyio import to_thread
from sqlalchemy import Engine, bindparam
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import (
    Priority,
    RawValue,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from api import registry
from api.accounts import new_id
from api.calls import idempotency
from api.calls.errors import ConcurrencyLimited, IdempotencyKeyReused
from api.checker import Checkers
from api.config import Settings
from api.db import read_session
from api.errors import Conflict, InvalidRequest, NotFound, RateLimited, ServiceUnavailable
from api.models import utcnow
from api.rawsql import Reads
from api.runs import grants
from api.runs.models import RoutineVersionPublic, RunError, RunPublic, RunSummary
from api.runs.progress import fill_outputs, note_retries
from api.runs.rerun import kept_steps, rerun_point
from api.runs.tables import RoutineRecord, RoutineVersion, RunRecord
from api.runs.waiting import Waits
from api.turns import Gates, org_turn
from engine import payloads
from engine.routine import Routine
from engine.runs import (
    SEARCH_ATTRIBUTE_ORG,
    SEARCH_ATTRIBUTE_RERUN_OF,
    SEARCH_ATTRIBUTE_ROUTINE,
    SEARCH_ATTRIBUTE_SCHEDULE,
    WORKFLOW_TYPE,
    RunRoutineInput,
    RunRoutineResult,
    StepResult,
    routine_workflow_id,
)
from engine.validate import RoutineInputError, resolve_inputs
from packs.resolve import ResolveError, parse_ref

T = TypeVar("T")
FINAL = frozenset({"succeeded", "failed", "cancelled"})
QUERY_TIMEOUT = timedelta(seconds=5)
RUNS_RETRY_AFTER_S = 5.0  # runs have no deadline to wait for: look again in a few seconds
RUNNING_COUNT_FRESH_S = 2.0
"""How long an api process goes by its count of an organization's running runs (a query of Temporal's
visibility, a good part of Temporal's work for a one-step run), adding the runs it started since. A count
that would refuse a start is always taken again."""
RUNNING_COUNTS_KEPT = 1024
"""Organizations whose count a process keeps before it drops the stale ones."""


PROGRESS_KEPT = 256
"""Running runs whose last `progress` answer an api process keeps (the least recently read go first; an
answer carries step outputs up to 512 KiB, so at most 128 MiB)."""

STARTS_AT_ONCE_PER_ORG = 1
"""Run starts of one organization an api process works on at once; its other starts wait their turn, so a
burst of one organization's starts does not take the process's CPU (checking, hashing and encoding large
inputs) and the database's one writer ahead of another organization's start. One start takes ~30 ms, so
an organization still starts ~30 runs a second per api process, above its starts per minute."""


VERSIONS_KEPT = 4096
"""The routine versions a process knows are kept (then it forgets them all and asks again)."""
ROUTINES_KEPT_BYTES = 32 * 1024 * 1024
"""How much routine YAML (by size) a process keeps validated in memory for run starts."""


@dataclass(frozen=True)
class _Version:
    """The routine version a start runs, with its inputs (a re-run: its routine and pins known too)."""

    name: str
    routine_version: int
    version: str
    inputs: dict[str, Any]
    routine: Routine | None = None
    pins: dict[str, str] | None = None


@dataclass(frozen=True)
class _Request:
    """Who starts a run, under which id and key, with which request (hashed for the key)."""

    org_id: str
    key_id: str
    run_id: str
    idempotency_key: str | None
    body: dict[str, Any]
    reused: dict[str, StepResult]
    rerun_of: str | None
    schedule_id: str | None


@dataclass
class _Running:
    """An organization's running runs as Temporal counted them, and those this process started since."""

    counted: int
    at: float  # time.monotonic() of the count
    since: int = 0


@dataclass(frozen=True)
class _Launch:
    """A start ready for Temporal: its row, routine, encoded workflow input, grant and deadline."""

    row: RunRecord
    routine: Routine
    payload: Payload
    grant: str
    lasts: timedelta


def run_priority(running: int) -> int:
    """The Temporal priority key (1 first .. 5 last) of a run whose organization has `running` runs in
    flight: 1 with none, 2 with one, 3 with 2-3, 4 with 4-7, 5 with 8 or more. A worker busy with one
    organization's many runs takes the workflow tasks of an organization with few first (docs/routines.md,
    Fairness); the run's activities inherit the key.
    """
    return 1 + min(4, max(0, running).bit_length())


_ROUTINE = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ROUTINE)
_ORG = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ORG)
_RERUN_OF = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_RERUN_OF)
_SCHEDULE = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_SCHEDULE)
_STATUS = {  # a run's status from its workflow's; any other ending is a failure, as in _refresh
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "succeeded",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


def routine_hash(source: str) -> str:
    """A routine version's id: `sha256:<hex>` of its YAML as sent."""
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()


_CURRENT_SOURCE = select(RoutineRecord.version, RoutineRecord.source).where(
    col(RoutineRecord.org_id) == bindparam("org_id"), col(RoutineRecord.name) == bindparam("name")
)
_STARTS_SINCE = (
    select(RunRecord.created_at)
    .where(col(RunRecord.org_id) == bindparam("org_id"), col(RunRecord.created_at) > bindparam("since"))
    .order_by(col(RunRecord.created_at))
)  # built once, as _CURRENT_SOURCE: every start reads them


class RunsService:
    """Routines and runs of every organization, over one database engine and one Temporal client."""

    def __init__(self, engine: Engine, settings: Settings, checkers: Checkers) -> None:
        self._engine = engine
        self._settings = settings
        self._client: Client | None = None
        self._checkers = checkers
        self._lock = asyncio.Lock()
        self._starting: dict[str, int] = {}  # runs each organization is starting in this process now
        self._running: dict[str, _Running] = {}  # per org: its last count of running runs
        self._turns: Gates = {}  # per org: its gate, starts in it
        # routine versions are never changed nor deleted: each (org, name, hash) read once is known here
        self._kept: set[tuple[str, str, str]] = set()
        self._routines: dict[tuple[str, str, str], Routine] = {}
        self._routines_bytes = 0  # the YAML sizes of the routines kept
        self._versions: registry.KnownVersions = {}  # pack versions read for pins (immutable, as routines)
        # per workflow id: (run id, history length) and the progress answered at that length
        self._progress: OrderedDict[str, tuple[tuple[str, int], RunRoutineResult]] = OrderedDict()
        self._waits = Waits()  # reads waiting for their run's end

    @asynccontextmanager
    async def _turn(self, org_id: str) -> AsyncIterator[None]:
        """One of the organization's `STARTS_AT_ONCE_PER_ORG` turns to start a run in this process."""
        async with org_turn(self._turns, org_id, lambda: asyncio.Semaphore(STARTS_AT_ONCE_PER_ORG)):
            yield

    async def _db(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await to_thread.run_sync(partial(fn, *args, **kwargs))

    async def client(self) -> Client:
        """The Temporal client, connected on first use (ServiceUnavailable when Temporal is down)."""
        async with self._lock:
            if self._client is None:
                from engine.worker import connect, ensure_search_attributes, tls_config

                s = self._settings
                address = s.temporal_address
                try:
                    tls = tls_config(
                        enabled=s.temporal_tls,
                        ca_file=s.temporal_tls_ca_file,
                        cert_file=s.temporal_tls_cert_file,
                        key_file=s.temporal_tls_key_file,
                        server_name=s.temporal_tls_server_name,
                    )
                except ValueError as exc:
                    raise ServiceUnavailable(
                        f"This api's Temporal TLS settings are wrong ({exc}); an operator must fix them.",
                        retry_after_s=60,
                    ) from None
                try:
                    client = await connect(address, s.temporal_namespace, tls)
                except (RuntimeError, RPCError) as exc:
                    raise ServiceUnavailable(
                        f"Temporal at {address} is not reachable; try again shortly.", retry_after_s=5
                    ) from exc
                await ensure_search_attributes(client)
                self._client = client
            return self._client

    # --- routines ----------------------------------------------------------------------------

    async def store_routine(
        self, *, org_id: str, source: str, check: Callable[[Routine], None] | None = None
    ) -> RoutineRecord:
        """Validate a routine's YAML and store it, replacing the organization's routine of that name.

        The YAML is read and checked in a checker process (`api.checker`): every `uses:` must
        resolve in this api's registry, and literal `with:` values must fit the action's inputSchema
        (`api.runs.resolver.DbResolver`). `check` may refuse the valid routine before anything is written.

        Raises:
            InvalidRequest: the YAML has problems (each `line:column: message` in `problems`), or could not
                be read within the time or memory a routine may take.
            ServiceUnavailable: no checker could start.
        """
        data = await self._checkers.routine(org_id, source)
        row: RoutineRecord = await self._db(self._store_checked, org_id, source, data, check)
        return row

    def _store_checked(
        self, org_id: str, source: str, data: dict[str, Any], check: Callable[[Routine], None] | None
    ) -> RoutineRecord:
        """Store a routine its checker has read (`data`: the routine as stored)."""
        routine = Routine.model_validate(data)
        if check is not None:
            check(routine)
        with Session(self._engine) as session:
            row = session.exec(
                select(RoutineRecord).where(
                    RoutineRecord.org_id == org_id, RoutineRecord.name == routine.name
                )
            ).first()
            if row is None:
                row = RoutineRecord(
                    id=new_id("rtn"),
                    org_id=org_id,
                    name=routine.name,
                    source=source,
                    routine=data,
                    description=routine.description,
                )
            else:
                row.version, row.source, row.routine = row.version + 1, source, data
                row.description, row.updated_at = routine.description, utcnow()
            session.add(row)
            self._keep_version(session, org_id=org_id, name=routine.name, source=source, routine=data)
            session.commit()
            session.refresh(row)
            return row

    @staticmethod
    def _keep_version(
        session: Session, *, org_id: str, name: str, source: str, routine: dict[str, Any]
    ) -> str:
        """Add this YAML to the routine's versions unless it is there already (the caller commits)."""
        version = routine_hash(source)
        if session.get(RoutineVersion, (org_id, name, version)) is None:
            session.add(
                RoutineVersion(org_id=org_id, name=name, hash=version, source=source, routine=routine)
            )
        return version

    def list_versions(self, *, org_id: str, name: str) -> list[RoutineVersionPublic]:
        """Every version of the organization's routine, newest first (NotFound: no such routine)."""
        current = routine_hash(self.get_routine(org_id=org_id, name=name).source)
        with Session(self._engine) as session:
            rows = session.exec(
                select(RoutineVersion)
                .where(RoutineVersion.org_id == org_id, RoutineVersion.name == name)
                .order_by(col(RoutineVersion.stored_at).desc())
            ).all()
        return [
            RoutineVersionPublic(
                hash=r.hash,
                stored_at=r.stored_at,
                yaml_bytes=len(r.source.encode()),
                current=r.hash == current,
            )
            for r in rows
        ]

    def get_routine(self, *, org_id: str, name: str) -> RoutineRecord:
        """The organization's routine of this name, or NotFound."""
        with read_session(self._engine) as session:
            row = session.exec(
                select(RoutineRecord).where(RoutineRecord.org_id == org_id, RoutineRecord.name == name)
            ).first()
        if row is None:
            raise _no_routine(name)
        return row

    def list_routines(self, *, org_id: str) -> list[RoutineRecord]:
        """The organization's routines by name."""
        with read_session(self._engine) as session:
            query = (
                select(RoutineRecord).where(RoutineRecord.org_id == org_id).order_by(col(RoutineRecord.name))
            )
            return list(session.exec(query).all())

    # --- runs --------------------------------------------------------------------------------

    async def start_run(
        self, *, org_id: str, key_id: str, name: str, inputs: dict[str, Any], idempotency_key: str | None
    ) -> tuple[RunRecord, bool]:
        """Start a run of a stored routine; with an Idempotency-Key a repeat gives the same run.

        Returns:
            The run's row, and whether this request started it (False: the key's earlier run).

        Raises:
            NotFound: no such routine. InvalidRequest: the inputs do not fit or the key is malformed.
            IdempotencyKeyReused: 422, the key was used with another request.
            ServiceUnavailable: Temporal is not reachable.
        """
        async with self._turn(org_id):
            return await self._start(
                org_id=org_id,
                key_id=key_id,
                version=self._current(org_id, name, inputs),
                idempotency_key=idempotency_key,
                request={"routine": name, "inputs": inputs},
            )

    def _current(self, org_id: str, name: str, inputs: dict[str, Any]) -> Callable[[], _Version]:
        """The routine's current version with these inputs, read when the start is made ready (NotFound)."""

        def read() -> _Version:
            with read_session(self._engine) as session:  # the YAML's hash, not the stored routine's JSON
                found = session.exec(_CURRENT_SOURCE, params={"org_id": org_id, "name": name}).first()
            if found is None:
                raise _no_routine(name)
            number, source = found
            version = routine_hash(source)
            if (org_id, name, version) not in self._kept:
                version = self._current_version(self.get_routine(org_id=org_id, name=name))
            return _Version(name, number, version, inputs)

        return read

    def _current_version(self, record: RoutineRecord) -> str:
        """The routine's current version (kept in `routine_versions` if it was not yet: a routine stored
        before versions were kept); a version this process has seen costs no query."""
        version = routine_hash(record.source)
        key = (record.org_id, record.name, version)
        if key in self._kept:
            return version
        with read_session(self._engine) as session:
            kept = session.get(RoutineVersion, key) is not None
        if not kept:
            with Session(self._engine) as session:
                self._keep_version(
                    session,
                    org_id=record.org_id,
                    name=record.name,
                    source=record.source,
                    routine=record.routine,
                )
                session.commit()
        if len(self._kept) >= VERSIONS_KEPT:
            self._kept.clear()
        self._kept.add(key)
        return version

    async def rerun(
        self, *, org_id: str, key_id: str, run_id: str, from_step: str | None, idempotency_key: str | None
    ) -> tuple[RunRecord, bool]:
        """Start a re-run of an ended run: the same routine version, inputs and pins, keeping the steps
        before the point (api.runs.rerun) and running the point and what follows it.

        Raises:
            NotFound: no such run in this organization. Conflict: it still runs, it has nothing to re-run
                from, or its routine version is gone. InvalidRequest: `from` names no step.
        """
        old: RunRecord = await self._db(self._get_run, org_id, run_id)
        if old.status not in FINAL:
            await self._refresh(old)
        if old.status not in FINAL:
            raise Conflict(
                f"Run {run_id} is still running: re-run it once it has ended (or cancel it first).",
                field="run_id",
                status_now=old.status,
            )
        version, data = await self._db(self._version_of_run, old)
        routine = Routine.model_validate(data)
        result = RunRoutineResult.model_validate(old.result or {})
        point = rerun_point(routine, result, old.id, from_step)
        same = _Version(old.routine_name, old.routine_version, version, old.inputs, routine, old.pins)
        return await self._start(
            org_id=org_id,
            key_id=key_id,
            version=lambda: same,
            idempotency_key=idempotency_key,
            request={"rerun": old.id, "from": point},
            reused=kept_steps(routine, result, point),
            rerun_of=old.id,
        )

    def _version_of_run(self, run: RunRecord) -> tuple[str, dict[str, Any]]:
        """The routine version a run ran, and that version's validated routine."""
        with Session(self._engine) as session:
            if run.routine_hash is not None:
                kept = session.get(RoutineVersion, (run.org_id, run.routine_name, run.routine_hash))
                if kept is not None:
                    return kept.hash, kept.routine
            else:  # a run from before versions were kept: its version is the current one, if unchanged
                record = session.exec(
                    select(RoutineRecord).where(
                        RoutineRecord.org_id == run.org_id, RoutineRecord.name == run.routine_name
                    )
                ).first()
                if record is not None and record.version == run.routine_version:
                    return routine_hash(record.source), record.routine
        raise Conflict(
            f"Run {run.id} ran a version of routine {run.routine_name!r} that this api no longer has, so it "
            "cannot be re-run: start a new run.",
            field="run_id",
        )

    async def _start(
        self,
        *,
        org_id: str,
        key_id: str,
        version: Callable[[], _Version],
        idempotency_key: str | None,
        request: dict[str, Any],
        reused: dict[str, StepResult] | None = None,
        rerun_of: str | None = None,
        schedule_id: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Start a run of one routine version (the one path of run starts, re-runs and scheduled runs).

        Everything before Temporal is asked is done in one worker thread (`_launch`): each hop between the
        event loop and a thread waits for the interpreter's lock, which a busy process hands over slowly.
        """
        if idempotency_key is not None:
            idempotency.check_key(idempotency_key)
            run_id = "run_" + hashlib.sha256(f"{org_id}\n{idempotency_key}".encode()).hexdigest()[:20]
        else:
            run_id = new_id("run")
        launch = await self._db(
            self._launch,
            _Request(org_id, key_id, run_id, idempotency_key, request, reused or {}, rerun_of, schedule_id),
            version,
        )
        if isinstance(launch, RunRecord):  # the Idempotency-Key's earlier run (Temporal not asked)
            return _same_request(launch, request, idempotency_key or ""), False
        await self._start_workflow(launch)
        stored, created = await self._db(self._insert_run, launch.row)
        if not created:
            return _same_request(stored, request, idempotency_key or ""), False
        stored.result = _at_start(launch.routine).model_dump(mode="json")  # answered, not stored
        return stored, True

    def _launch(self, request: _Request, version: Callable[[], _Version]) -> RunRecord | _Launch:
        """A start made ready (in a worker thread): the key's earlier run if it has one; else, the starts
        of the last minute counted, the version's routine, pins and inputs checked, the run's grant minted
        and its workflow's start encoded.

        Raises:
            NotFound, InvalidRequest, RateLimited: as `start_run` says.
        """
        if request.idempotency_key is not None:
            earlier = self._run_by_key(request.org_id, request.idempotency_key)
            if earlier is not None:
                return earlier
        v = version()
        self._check_starts(request.org_id)
        routine = v.routine or self._routine_of_version(request.org_id, v.name, v.version)
        pins = v.pins if v.pins is not None else self._pinned(v.name, routine)
        keyed = request.body if request.idempotency_key is not None else None
        resolved, request_hash = _checked_inputs(v.name, routine, v.inputs, keyed)
        row = RunRecord(
            id=request.run_id,
            org_id=request.org_id,
            key_id=request.key_id,
            routine_name=v.name,
            routine_version=v.routine_version,
            routine_hash=v.version,
            pins=pins,
            rerun_of=request.rerun_of,
            schedule_id=request.schedule_id,
            workflow_id=routine_workflow_id(v.name, request.run_id),
            idempotency_key=request.idempotency_key,
            request_hash=request_hash,
            inputs=resolved,
        )
        lasts = timedelta(seconds=self._settings.run_timeout_s)
        grant = self._mint_grant(row, lasts)
        try:
            # the converter of every b3os Temporal client (engine.worker.connect)
            payload = pydantic_data_converter.payload_converter.to_payload(
                RunRoutineInput(
                    routine=routine,
                    inputs=row.inputs,
                    org_id=row.org_id,
                    key_id=row.key_id,
                    run_id=row.id,
                    pins=pins,
                    grant=grant,
                    reused=request.reused,
                )
            )
            size = payload.ByteSize()
            if size > payloads.PAYLOAD_LIMIT_BYTES - 64 * payloads.KIB:
                raise InvalidRequest(
                    f"The run's start (the routine and its inputs) is {payloads.size_text(size)} encoded, "
                    f"more than Temporal takes in one payload "
                    f"({payloads.size_text(payloads.PAYLOAD_LIMIT_BYTES)}): send smaller inputs.",
                    field="inputs",
                )
        except BaseException:
            self._forget_grant(grant)
            raise
        return _Launch(row, routine, payload, grant, lasts)

    def _routine_of_version(self, org_id: str, name: str, version: str) -> Routine:
        """A version's validated routine (read and validated once per process: versions never change)."""
        key = (org_id, name, version)
        routine = self._routines.get(key)
        if routine is not None:
            return routine
        with read_session(self._engine) as session:
            kept = session.get(RoutineVersion, key)
        if kept is None:
            raise _no_routine(name)
        routine = Routine.model_validate(kept.routine)
        size = len(kept.source)
        if self._routines_bytes + size > ROUTINES_KEPT_BYTES:
            self._routines.clear()
            self._routines_bytes = 0
        self._routines[key] = routine
        self._routines_bytes += size
        return routine

    def _pinned(self, name: str, routine: Routine) -> dict[str, str]:
        """The exact pin of each `uses:` as the registry resolves it now: what the run calls, whatever is
        published while it runs (a re-run calls the pins of the run it re-runs).

        Raises:
            InvalidRequest: a `uses:` no longer resolves (its pack, version or action is gone).
        """
        pins: dict[str, str] = {}
        with Reads(self._engine) as reads:
            for step in routine.steps:
                if step.uses in pins:
                    continue
                try:
                    ref = parse_ref(step.uses)  # a malformed one is refused here too
                    resolved, _ = registry.resolve_known(reads, ref=ref, known=self._versions)
                except ResolveError as exc:
                    raise InvalidRequest(
                        f"Routine {name!r}, step {step.id!r}: uses: cannot resolve {step.uses}: {exc}",
                        field="yaml",
                    ) from None
                pins[step.uses] = resolved.pin
        return pins

    def _check_starts(self, org_id: str) -> None:
        """Refuse a start past the organization's `run_starts_per_minute` (429 rate_limited, Retry-After)."""
        limit = self._settings.run_starts_per_minute
        since = utcnow() - timedelta(seconds=60)
        with read_session(self._engine) as session:
            started = session.exec(_STARTS_SINCE, params={"org_id": org_id, "since": since}).all()
        if len(started) >= limit:
            frees_at = started[len(started) - limit] + timedelta(seconds=60)
            raise RateLimited(
                f"This organization started {len(started)} runs in the last 60 seconds, the most it may "
                f"({limit}).",
                retry_after_s=max(1, int((frees_at - utcnow()).total_seconds()) + 1),
                limit=limit,
            )

    async def _check_running(self, client: Client, org_id: str) -> int:
        """Refuse a start past the organization's runs at once (`runs_per_org`), with Retry-After.

        Counted by Temporal's visibility, so every api process sees the same number; a count is reused
        for `RUNNING_COUNT_FRESH_S` with the runs this process started since, unless it would refuse. Starts
        that another api process makes meanwhile are not seen: they may overshoot the limit by a few.

        Returns:
            The organization's runs running now.
        """
        limit = self._settings.runs_per_org
        now = time.monotonic()
        seen = self._running.get(org_id)
        if seen is None or now - seen.at > RUNNING_COUNT_FRESH_S or seen.counted + seen.since >= limit:
            query = f"{SEARCH_ATTRIBUTE_ORG} = {_quoted(org_id)} AND ExecutionStatus = 'Running'"
            try:
                seen = _Running((await client.count_workflows(query)).count, now)
            except RPCError as exc:
                raise ServiceUnavailable(
                    f"Temporal did not count the running runs: {exc.message}", retry_after_s=5
                ) from exc
            if len(self._running) >= RUNNING_COUNTS_KEPT:
                self._running = {
                    o: r for o, r in self._running.items() if now - r.at <= RUNNING_COUNT_FRESH_S
                }
            self._running[org_id] = seen
        running = seen.counted + seen.since
        if running >= limit:
            raise ConcurrencyLimited(
                f"this organization already has {running} runs running, the most it may at once "
                f"({limit}); start this one when one of them has ended",
                retry_after=RUNS_RETRY_AFTER_S,
                details={"limit": limit},
            )
        return running

    async def _start_workflow(self, launch: _Launch) -> None:
        """Start the run's workflow, at the priority its organization's runs in flight give it.

        Raises:
            ConcurrencyLimited: the organization runs its most runs at once. ServiceUnavailable: Temporal.
        """
        row = launch.row
        org = row.org_id
        # the starts of this process not yet visible count too: a burst of starts sees itself
        starting = self._starting.get(org, 0)
        self._starting[org] = starting + 1
        started = False
        try:
            client = await self.client()
            running = await self._check_running(client, org)
            await client.start_workflow(
                WORKFLOW_TYPE,
                RawValue(launch.payload),
                id=row.workflow_id,
                task_queue=self._settings.temporal_task_queue,
                search_attributes=TypedSearchAttributes(_search_attributes(row)),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                execution_timeout=launch.lasts,
                static_summary=f"{row.routine_name} · {row.id}",
                priority=Priority(priority_key=run_priority(running + starting)),
            )
            started = True
            if (seen := self._running.get(org)) is not None:
                seen.since += 1
        except WorkflowAlreadyStartedError:
            pass  # the same idempotent run, already finished: its row is written next
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not start the run: {exc.message}", retry_after_s=5
            ) from exc
        finally:
            self._starting[org] -= 1
            if not self._starting[org]:
                del self._starting[org]
            if not started:  # a run that an earlier request started holds that request's grant
                await self._db(self._forget_grant, launch.grant)

    def _mint_grant(self, row: RunRecord, lasts: timedelta) -> str:
        with Session(self._engine) as session:
            secret = grants.mint(
                session,
                run_id=row.id,
                org_id=row.org_id,
                key_id=row.key_id,
                workflow_id=row.workflow_id,
                lasts=lasts,
            )
            session.commit()
            return secret

    def _forget_grant(self, secret: str) -> None:
        with Session(self._engine) as session:
            grants.forget(session, secret)
            session.commit()

    def _mark_grants(self, run_id: str, mark: Any) -> None:
        with Session(self._engine) as session:
            mark(session, run_id)
            session.commit()

    def _run_by_key(self, org_id: str, key: str) -> RunRecord | None:
        with read_session(self._engine) as session:
            return session.exec(
                select(RunRecord).where(RunRecord.org_id == org_id, RunRecord.idempotency_key == key)
            ).first()

    def _insert_run(self, row: RunRecord) -> tuple[RunRecord, bool]:
        # every column's value is made here, not by the database: the row is not read back
        with Session(self._engine, expire_on_commit=False) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                existing = session.get(RunRecord, row.id)
                if existing is None:
                    raise
                return existing, False
            return row, True

    def _get_run(self, org_id: str, run_id: str) -> RunRecord:
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
            return _public(row)
        return await self.read_run(org_id=row.org_id, run_id=row.id)

    async def read_run(self, *, org_id: str, run_id: str, wait_s: float = 0) -> RunPublic:
        """A run as it is now: from its row once finished, else from Temporal (status and progress); a
        running run after it has ended or `wait_s` seconds have passed, whichever comes first
        (`api.runs.waiting`)."""
        row: RunRecord = await self._db(self._get_run, org_id, run_id)
        if row.status not in FINAL:
            if wait_s > 0:
                await self._waits.until_closed(await self.client(), row.workflow_id, wait_s)
            await self._refresh(row)
        return _public(row)

    async def list_runs(self, *, org_id: str, routine: str | None, limit: int) -> list[RunSummary]:
        """The organization's newest runs, newest first."""
        rows: list[RunRecord] = await self._db(self._list_rows, org_id, routine, limit)
        unfinished = {r.workflow_id: r for r in rows if r.status not in FINAL}
        if unfinished:
            for workflow_id, (status, closed_at) in (await self._visible(org_id, list(unfinished))).items():
                row = unfinished[workflow_id]
                row.status, row.finished_at = status, closed_at
        return [
            RunSummary(
                run_id=r.id,
                routine=r.routine_name,
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
        client = await self.client()
        ids = ", ".join(_quoted(w) for w in workflow_ids)
        query = f"{SEARCH_ATTRIBUTE_ORG} = {_quoted(org_id)} AND WorkflowId IN ({ids})"
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
        row: RunRecord = await self._db(self._get_run, org_id, run_id)
        if row.status not in FINAL:
            await self._refresh(row)
        if row.status in FINAL:
            raise Conflict(
                f"Run {run_id} has already ended ({row.status}).", field="run_id", status_now=row.status
            )
        client = await self.client()
        try:
            await client.get_workflow_handle(row.workflow_id).cancel()
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not cancel the run: {exc.message}", retry_after_s=5
            ) from exc
        await self._db(self._mark_grants, row.id, grants.cancelled)
        return row

    async def _refresh(self, row: RunRecord) -> None:
        """Read a run's state from Temporal into `row`; a finished run's state is saved."""
        client = await self.client()
        handle = client.get_workflow_handle(row.workflow_id, result_type=RunRoutineResult)
        try:
            desc = await handle.describe()
        except RPCError as exc:
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
                "message": f"the run was {what} in Temporal",
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
        await self._db(self._save_final, row)

    async def _progress_of(
        self, handle: WorkflowHandle[Any, RunRoutineResult], desc: WorkflowExecutionDescription
    ) -> RunRoutineResult:
        """The running run's `progress`, asked of its worker only when its history has grown since this
        process last asked: its state changes only in a workflow task, which adds events, so while a step's
        call runs (no new event) a poll costs a describe, not a query (a worker activation) as well."""
        seen = (desc.run_id, desc.history_length)
        kept = self._progress.get(desc.id)
        if kept is not None and kept[0] == seen:
            self._progress.move_to_end(desc.id)
            return kept[1].model_copy(deep=True)
        progress = await _progress(handle)
        if progress.steps:  # an empty answer (no worker answered in time) is not kept
            self._progress[desc.id] = (seen, progress.model_copy(deep=True))
            self._progress.move_to_end(desc.id)
            while len(self._progress) > PROGRESS_KEPT:
                self._progress.popitem(last=False)
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


def _same_request(row: RunRecord, request: dict[str, Any], key: str) -> RunRecord:
    """The run of an Idempotency-Key when `request` is the one it started with, by the calls' own rule."""
    if row.request_hash not in (idempotency.request_hash(request), _legacy_hash(request)):
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key[:100]!r} was already used for a different request (another routine or "
            "other inputs); use a new key for a new request",
            details={"field": "Idempotency-Key"},
        )
    return row


def _legacy_hash(value: Any) -> str:
    """How runs stored before the RFC 8785 rule hashed their request (kept so their keys still replay)."""
    return (
        "sha256:"
        + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    )


def _quoted(value: str) -> str:
    """A string literal of a visibility query (ids never hold a quote; one would be dropped)."""
    return "'" + value.replace("'", "") + "'"


def _no_routine(name: str) -> NotFound:
    return NotFound(f"Your organization has no routine named {name[:100]!r}.", field="name")


def _search_attributes(row: RunRecord) -> list[SearchAttributePair[str]]:
    pairs = [SearchAttributePair(_ROUTINE, row.routine_name), SearchAttributePair(_ORG, row.org_id)]
    if row.rerun_of:
        pairs.append(SearchAttributePair(_RERUN_OF, row.rerun_of))
    if row.schedule_id:
        pairs.append(SearchAttributePair(_SCHEDULE, row.schedule_id))
    return pairs


def _at_start(routine: Routine) -> RunRoutineResult:
    """A run's progress as its workflow begins it (engine.workflow: every step pending)."""
    return RunRoutineResult(steps={step.id: StepResult() for step in routine.steps})


def _checked_inputs(
    name: str, routine: Routine, inputs: dict[str, Any], request: dict[str, Any] | None
) -> tuple[dict[str, Any], str]:
    """A run's inputs with their defaults, checked against the routine and Temporal's payload limits, and
    the hash of its start request for its Idempotency-Key (empty with no key: only a key's repeat is
    compared, and RFC 8785 in pure Python is a third of the check's time for a large input).

    Raises:
        InvalidRequest: naming the input at fault.
    """
    try:
        resolved = resolve_inputs(routine, inputs)
        payloads.check_inputs(resolved)
    except RoutineInputError as exc:
        raise InvalidRequest(
            f"The inputs do not fit routine {name!r}: {exc}", field="inputs", problems=exc.problems
        ) from None
    except payloads.PayloadError as exc:
        field = exc.field or "inputs"
        raise InvalidRequest(f"The inputs cannot run: {exc.message}.", field=field) from None
    return resolved, "" if request is None else idempotency.request_hash(request)


def _public(row: RunRecord) -> RunPublic:
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
    )
