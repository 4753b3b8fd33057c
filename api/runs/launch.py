"""A run start made ready, in one worker thread: the Idempotency-Key's earlier run if it has one; else the
organization's starts of the last minute counted (api.runs.limits), the routine version read, each
`uses:` pinned to the exact version the registry resolves now, the inputs checked with their defaults,
the run's ceiling checked against its `max_cost_microusd` when it has one (api.routines.ceiling), the run's
grant minted (api.runs.grants) and the workflow's start encoded and checked against Temporal's payload limit.
Only then is Temporal asked (api.runs.starts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import select
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter

from api import rawsql
from api.calls import idempotency
from api.db import read_session
from api.errors import InvalidRequest
from api.rawsql import Reads
from api.registry import catalog
from api.routines.estimates import Estimates
from api.routines.store import RoutineStore
from api.runs import grants
from api.runs.limits import TICK_RETRY_SPREAD_S, RunLimits
from api.runs.tables import RunRecord
from api.server_timing import phase
from engine import expressions, payloads
from engine.routine import Routine
from engine.run_inputs import RoutineInputError, resolve_inputs
from engine.runs import RunRoutineInput, StepResult, routine_workflow_id
from packs.resolve import ResolveError, parse_ref

_INSERT_RUN = insert(RunRecord)  # built once, run on the driver (api.rawsql): every run start writes it


@dataclass(frozen=True)
class RunVersion:
    """The routine version a start runs, with its inputs (a re-run: its routine and pins known too)."""

    name: str
    routine_version: int
    version: str
    inputs: dict[str, Any]
    routine: Routine | None = None
    pins: dict[str, str] | None = None


@dataclass(frozen=True)
class StartRequest:
    """Who starts a run, under which id and key, with which request (hashed for the key)."""

    org_id: str
    key_id: str
    run_id: str
    idempotency_key: str | None
    body: dict[str, Any]
    reused: dict[str, StepResult]
    rerun_of: str | None
    schedule_id: str | None
    event: dict[str, Any] | None = None  # the event of a run a trigger starts (api.triggers.deliveries)
    max_cost_microusd: int | None = None


@dataclass(frozen=True)
class Launch:
    """A start ready for Temporal: its row, routine, encoded workflow input, grant and deadline."""

    row: RunRecord
    routine: Routine
    payload: Payload
    grant: str
    lasts: timedelta


class Launches:
    """Makes run starts ready, over one database engine (its methods run in worker threads)."""

    def __init__(
        self,
        engine: Engine,
        routines: RoutineStore,
        limits: RunLimits,
        estimates: Estimates,
        *,
        lasts: timedelta,
    ) -> None:
        self._engine = engine
        self._estimates = estimates
        self._routines = routines
        self._limits = limits
        self._lasts = lasts
        self._versions: catalog.KnownVersions = {}  # pack versions read for pins (immutable, as routines)

    def ready(self, request: StartRequest, version: Callable[[], RunVersion]) -> RunRecord | Launch:
        """A start made ready (in a worker thread): the key's earlier run if it has one; else, the starts
        of the last minute counted, the version's routine, pins and inputs checked, the run's grant minted
        and its workflow's start encoded.

        Raises:
            NotFound, InvalidRequest, RateLimited, ConcurrencyLimited: as `start_run` says.
        """
        if request.idempotency_key is not None:
            earlier = self._run_by_key(request.org_id, request.idempotency_key)
            if earlier is not None:
                return earlier
        v = version()
        spread_s = TICK_RETRY_SPREAD_S if request.schedule_id is not None else 0.0
        self._limits.check_starts(request.org_id, spread_s=spread_s)
        # before the grant is written (and removed again)
        self._limits.check_known_running(request.org_id, spread_s=spread_s)
        routine = v.routine or self._routines.routine_of_version(
            org_id=request.org_id, name=v.name, version=v.version
        )
        pins = v.pins if v.pins is not None else self._pinned(v.name, routine)
        keyed = request.body if request.idempotency_key is not None else None
        resolved, request_hash = _checked_inputs(v.name, routine, v.inputs, keyed)
        if request.max_cost_microusd is not None:
            self._check_ceiling(routine, v.version, resolved, pins, request.max_cost_microusd)
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
            event=request.event,
            max_cost_microusd=request.max_cost_microusd,
        )
        cleanup = [step.id for step in routine.steps if expressions.runs_after_cancel(step.if_)]
        steps = {
            step.id: grants.GrantStep(ref=pins.get(step.uses, step.uses), foreach=step.foreach is not None)
            for step in routine.steps
        }
        with phase("grant"):  # a write: it waits for the database's writers' turn
            grant = self._mint_grant(row, self._lasts, steps, cleanup)
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
                    event=request.event,
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
            self.forget_grant(grant)
            raise
        return Launch(row, routine, payload, grant, self._lasts)

    def _check_ceiling(
        self, routine: Routine, version: str, inputs: dict[str, Any], pins: dict[str, str], most: int
    ) -> None:
        """Refuse a start whose ceiling (its pins, these inputs) is above `most` micro-USD, or unbounded.

        Raises:
            InvalidRequest: `field: "max_cost_microusd"`, `reason: "max_cost"`, with the ceiling.
        """
        estimate = self._estimates.of(routine, version, inputs, pins, checked=True)
        if estimate.ceiling_microusd is not None and estimate.ceiling_microusd <= most:
            return
        if estimate.ceiling_microusd is None:
            steps = ", ".join(estimate.unbounded)
            message = (
                f"max_cost_microusd {most}: the run's cost has no bound (step {steps}: "
                f"{next(s.note for s in estimate.steps if s.ceiling_microusd is None)}), so it cannot start "
                "within a max; nothing was started or charged."
            )
        else:
            message = (
                f"max_cost_microusd {most}: the run can cost up to {estimate.ceiling_microusd} micro-USD "
                f"(POST /v1/routines/{routine.name}/estimate gives each step's part), more than its max, so "
                "it was not started and nothing was charged."
            )
        raise InvalidRequest(
            message,
            field="max_cost_microusd",
            reason="max_cost",
            ceiling_microusd=estimate.ceiling_microusd,
            unbounded=estimate.unbounded,
        )

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
                    resolved, _ = catalog.resolve_known(reads, ref=ref, known=self._versions)
                except ResolveError as exc:
                    raise InvalidRequest(
                        f"Routine {name!r}, step {step.id!r}: uses: cannot resolve {step.uses}: {exc}",
                        field="yaml",
                    ) from None
                pins[step.uses] = resolved.pin
        return pins

    def _mint_grant(
        self, row: RunRecord, lasts: timedelta, steps: dict[str, grants.GrantStep], cleanup_steps: list[str]
    ) -> str:
        with rawsql.transaction(self._engine) as tx:
            secret = grants.mint(
                tx,
                run_id=row.id,
                org_id=row.org_id,
                key_id=row.key_id,
                workflow_id=row.workflow_id,
                lasts=lasts,
                steps=steps,
                cleanup_steps=cleanup_steps,
                max_cost_microusd=row.max_cost_microusd,
            )
            tx.commit()
            return secret

    def forget_grant(self, secret: str) -> None:
        with rawsql.transaction(self._engine) as tx:
            grants.forget(tx, secret)
            tx.commit()

    def _run_by_key(self, org_id: str, key: str) -> RunRecord | None:
        with read_session(self._engine) as session:
            return session.exec(
                select(RunRecord).where(RunRecord.org_id == org_id, RunRecord.idempotency_key == key)
            ).first()

    def insert_run(self, row: RunRecord, execution_id: str | None = None) -> tuple[RunRecord, bool]:
        """Write the started run's row and bind its grant to the Temporal run the api started (in one
        transaction); the stored row, and whether this call wrote it."""
        # every column's value is made here, not by the database: the row is not read back
        with rawsql.transaction(self._engine) as tx:
            try:
                rawsql.execute(tx, _INSERT_RUN, row.model_dump())
                if execution_id is not None:
                    grants.bind(tx, row.id, execution_id)
                tx.commit()
                return row, True
            except IntegrityError as exc:
                lost = exc
        with read_session(self._engine) as session:  # the same run id or key, written first
            existing = session.get(RunRecord, row.id)
        if existing is None:
            raise lost
        return existing, False


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
