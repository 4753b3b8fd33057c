"""Run grants: a routine step's call is honoured only for a run this api started and that still runs.

When the api starts a run it mints a grant: a random secret (`b3run_` + 43 url-safe characters) that
travels in the workflow's input (`RunRoutineInput.grant`) to each step's activity. Only its sha256 is
kept, in `run_grants`, bound to the run, its organization, the key that started it and its workflow
id. The activity sends the grant beside the worker token (`X-B3OS-Run-Grant`) and names its step
(`X-B3OS-Run-Step: <step id>` or `<step id>/<foreach index>`). `check` honours the call when:

- the grant is one this api minted (one lookup by the hash's primary key, joined with the key row);
- the call comes from the workflow execution the api started (`X-B3OS-Run-Execution`, the activity's
  Temporal run id, against the one the api wrote with the run's row, or bound by the first call when the
  call came first): a workflow started again under the same id, by hand or by a reset, is refused; or
  from a child workflow of that execution running a chunk of a foreach's items, as Temporal says
  (api.runs.links), whose workflow id is one of that step's chunks' (engine.runs.foreach_workflow_id);
- the step is one of the run's routine version (`steps`, minted with the grant), with a foreach index
  exactly when it has foreach items (below `FOREACH_MAX_ITEMS`), and the call's `ref` is the one it
  pinned (`api.calls.service` compares it);
- the run has not ended: the runs service marks the grant ended as soon as it learns the run ended
  (GET /v1/runs/{id}, GET /v1/runs, a cancel of an ended run), and every grant expires with the
  run's execution timeout (`B3OS_RUN_TIMEOUT_S`, plus a minute) however the run ended;
- the run was not cancelled, unless the request cancels a call (a cancelled step stops its call), or
  the step is one of the run's cleanup steps (its `if:` calls `always()` or `cancelled()`, noted when
  the grant is minted) and `CLEANUP_TIME` has not passed since the cancel: the cleanup a routine
  declares runs after a cancel, as docs/routines.md promises, for a bounded time;
- the Idempotency-Key is the one that step of that run's workflow derives
  (`activities.idempotency.step_idempotency_key`): a grant calls under its own run's keys only.

The worker token alone, with or without `X-B3OS-On-Behalf-Of`, calls nothing; a workflow started on
Temporal any other way holds no grant this api minted, so its steps are refused and no one is
charged. The grant is the one secret in a run's Temporal history (its input and each step's
activity input): it is worth nothing without the worker token, nothing to another execution, nothing
outside its run's steps, refs and keys, and nothing once its run has ended, and Temporal is reachable
by the api and the workers only (docs/operations.md).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, bindparam, delete, insert
from sqlalchemy import select as select_columns
from sqlmodel import Session, col, update

from activities.idempotency import step_idempotency_key
from api import rawsql
from api.accounts.organizations import FOUND_KEY_COLUMNS, FoundKey, found_key, hash_secret
from api.errors import Forbidden, Unauthorized
from api.models import ApiKey, Organization, utcnow
from api.rawsql import Reads, Transaction
from api.runs.tables import RunGrant
from engine.runs import FOREACH_MAX_ITEMS, is_foreach_workflow_id

GRANT_HEADER = "X-B3OS-Run-Grant"
STEP_HEADER = "X-B3OS-Run-Step"
EXECUTION_HEADER = "X-B3OS-Run-Execution"
GRANT_PREFIX = "b3run_"
EXPIRY_SLACK = dt.timedelta(seconds=60)  # Temporal's execution timeout starts a moment after the grant
_STEP = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,63})(?:/([0-9]{1,6}))?$")
_START_RUNS = "start runs with POST /v1/routines/{name}/runs"
CLEANUP_TIME = dt.timedelta(minutes=5)
"""How long after a cancel a run's cleanup steps may still start calls."""


# built once, run on the driver (api.rawsql): every run start writes them
_MINT = insert(RunGrant)
_BIND = (
    update(RunGrant)
    .where(col(RunGrant.run_id) == bindparam("b_run"), col(RunGrant.execution_id).is_(None))
    .values(execution_id=bindparam("b_execution"))
)
_FORGET = delete(RunGrant).where(col(RunGrant.grant_hash) == bindparam("b_hash"))


def mint(
    tx: Transaction,
    *,
    run_id: str,
    org_id: str,
    key_id: str,
    workflow_id: str,
    lasts: dt.timedelta,
    steps: Mapping[str, GrantStep] | None = None,
    cleanup_steps: Sequence[str] = (),
    max_cost_microusd: int | None = None,
) -> str:
    """Store a new grant for a run that is about to start (the caller commits); the secret, shown once.
    `steps`: each step of the run's routine version (None: any step, as grants minted before steps were
    bound); `cleanup_steps`: the steps that may still call for
    `CLEANUP_TIME` after a cancel; `max_cost_microusd`: the most the run's calls may cost in all."""
    secret = GRANT_PREFIX + secrets.token_urlsafe(32)
    grant = RunGrant(
        grant_hash=hash_secret(secret),
        run_id=run_id,
        org_id=org_id,
        key_id=key_id,
        workflow_id=workflow_id,
        expires_at=utcnow() + lasts + EXPIRY_SLACK,
        cleanup_steps=list(cleanup_steps),
        max_cost_microusd=max_cost_microusd,
        steps={
            step_id: {"ref": step.ref, "foreach": step.foreach} for step_id, step in (steps or {}).items()
        },
    )
    rawsql.execute(tx, _MINT, grant.model_dump())  # every column's value, made here
    return secret


def bind(tx: Transaction, run_id: str, execution_id: str) -> None:
    """The workflow of the run was started as Temporal run `execution_id`: its grant serves that execution
    only (unless a first call bound it already; the caller commits)."""
    rawsql.execute(tx, _BIND, {"b_run": run_id, "b_execution": execution_id})


def bind_first(engine: Engine, grant_hash: str, execution_id: str) -> bool:
    """Bind a grant the api has not bound yet to the execution of its first call (a call may come before the
    api has written what it started); whether the grant now serves `execution_id`."""
    with Session(engine) as session:
        session.exec(  # type: ignore[call-overload]
            update(RunGrant)
            .where(col(RunGrant.grant_hash) == grant_hash, col(RunGrant.execution_id).is_(None))
            .values(execution_id=execution_id)
        )
        session.commit()
        grant = session.get(RunGrant, grant_hash)
    return grant is not None and grant.execution_id == execution_id


def forget(tx: Transaction, secret: str) -> None:
    """Delete a grant whose run did not start (the caller commits)."""
    rawsql.execute(tx, _FORGET, {"b_hash": hash_secret(secret)})


def end(session: Session, run_id: str) -> None:
    """The run has ended: its grants call nothing more (the caller commits)."""
    session.exec(  # type: ignore[call-overload]
        update(RunGrant)
        .where(col(RunGrant.run_id) == run_id, col(RunGrant.ended_at).is_(None))
        .values(ended_at=utcnow())
    )


def cancelled(session: Session, run_id: str) -> None:
    """The run was asked to cancel: its steps start no new call, only cancel theirs (the caller commits)."""
    session.exec(  # type: ignore[call-overload]
        update(RunGrant)
        .where(col(RunGrant.run_id) == run_id, col(RunGrant.cancelled_at).is_(None))
        .values(cancelled_at=utcnow())
    )


@dataclass(frozen=True, slots=True)
class FoundGrant:
    """What a step's call needs of its run's grant (`lookup`), and the key that started the run."""

    run_id: str
    workflow_id: str
    key_id: str
    expires_at: dt.datetime
    cancelled_at: dt.datetime | None
    ended_at: dt.datetime | None
    cleanup_steps: list[str]
    key: FoundKey
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    execution_id: str | None = None
    grant_hash: str = ""
    max_cost_microusd: int | None = None


@dataclass(frozen=True, slots=True)
class GrantStep:
    """A step a grant calls for: the pinned ref it calls, and whether it has foreach items."""

    ref: str
    foreach: bool


@dataclass(frozen=True, slots=True)
class StepCall:
    """What a grant lets a step's request do: the one Idempotency-Key and the one ref it may call (None: a
    grant minted before steps were bound, any ref)."""

    key: str
    ref: str | None


_GRANT_AND_KEY = (
    select_columns(
        col(RunGrant.run_id),
        col(RunGrant.workflow_id),
        col(RunGrant.key_id),
        col(RunGrant.expires_at),
        col(RunGrant.cancelled_at),
        col(RunGrant.ended_at),
        col(RunGrant.cleanup_steps),
        col(RunGrant.steps),
        col(RunGrant.execution_id),
        col(RunGrant.max_cost_microusd),
        *FOUND_KEY_COLUMNS,
    )
    .join(ApiKey, col(ApiKey.id) == col(RunGrant.key_id))
    .outerjoin(Organization, col(Organization.id) == col(ApiKey.org_id))
    .where(col(RunGrant.grant_hash) == bindparam("grant_hash"))
)  # built once, run on a plain connection: every step's call reads it


def lookup(reads: Reads, secret: str) -> FoundGrant:
    """The grant of the run that `secret` was minted for, with the key that started the run.

    Raises:
        Unauthorized: no run of this api holds that grant.
    """
    grant_hash = hash_secret(secret)
    row = reads.run(_GRANT_AND_KEY, {"grant_hash": grant_hash}).first()
    if row is None:
        raise Unauthorized(
            f"{GRANT_HEADER} is not the grant of any run this api started, so the call is refused: "
            f"{_START_RUNS}."
        )
    return FoundGrant(
        run_id=row.run_id,
        workflow_id=row.workflow_id,
        key_id=row.key_id,
        expires_at=row.expires_at,
        cancelled_at=row.cancelled_at,
        ended_at=row.ended_at,
        cleanup_steps=list(row.cleanup_steps or []),
        key=found_key(row),
        steps=dict(row.steps or {}),
        execution_id=row.execution_id,
        grant_hash=grant_hash,
        max_cost_microusd=row.max_cost_microusd,
    )


def check(
    grant: FoundGrant,
    *,
    step: str,
    idempotency_key: str | None,
    cancelling: bool,
    execution: str | None,
    chunk: str | None = None,
) -> StepCall:
    """Refuse a step's call (or cancel) that its run's grant does not cover.

    Args:
        grant: The run's grant, from `lookup`.
        step: The `X-B3OS-Run-Step` header: `<step id>` or `<step id>/<foreach index>`.
        idempotency_key: The request's Idempotency-Key (header).
        cancelling: The request cancels a call (allowed while a cancelled run stops its steps).
        execution: The `X-B3OS-Run-Execution` header: the Temporal run id of the workflow the call comes
            from (the activity's own, as Temporal gave it); for a call from a foreach's child workflow,
            its parent's run id as Temporal gave it (api.runs.links).
        chunk: The workflow id of the foreach's child workflow the call comes from, once Temporal said
            its parent is `execution` of the run's workflow id (None: the call comes from the run's own).

    Returns:
        The Idempotency-Key the step derives and the ref it calls: the only ones this request may use.

    Raises:
        Forbidden: the run has ended, expired or was cancelled; the call comes from another workflow
            execution than the one the api started; the step is not one of the run's routine version (or
            its foreach index is out of bounds); or the key is not that step's.
    """
    run = f"Run {grant.run_id}"
    if grant.ended_at is not None:
        raise Forbidden(f"{run} has ended: its grant calls nothing more.", reason="run_ended")
    if utcnow() >= grant.expires_at:
        raise Forbidden(
            f"{run} has outlived its execution timeout: its grant calls nothing more.", reason="run_ended"
        )
    if grant.execution_id is not None and (execution or "").strip() != grant.execution_id:
        raise not_its_execution(grant.run_id)
    match = _STEP.match(step.strip())
    if match is None:
        raise Forbidden(
            f"A step's call names its step: send {STEP_HEADER}: <step id> or <step id>/<foreach index>.",
            reason="step_unknown",
        )
    step_id, index = match.group(1), None if match.group(2) is None else int(match.group(2))
    if chunk is not None and (index is None or not is_foreach_workflow_id(chunk, grant.workflow_id, step_id)):
        raise not_its_execution(grant.run_id)
    ref = _step_ref(grant, run, step_id, index)
    if grant.cancelled_at is not None and not cancelling:
        _check_cleanup(grant, run, step_id)
    expected = step_idempotency_key(grant.workflow_id, step_id, index)
    if idempotency_key is None or idempotency_key.strip() != expected:
        raise Forbidden(
            f"The Idempotency-Key is not the key that step {step.strip()} of run {grant.run_id} derives: a "
            "run's grant calls only under its own steps' keys.",
            reason="key_not_of_run",
        )
    return StepCall(key=expected, ref=ref)


def not_its_execution(run_id: str) -> Forbidden:
    """The refusal of a call from another workflow execution than the one the api started for the run."""
    return Forbidden(
        f"This call does not come from the workflow execution the api started for run {run_id} "
        f"({EXECUTION_HEADER}): its grant serves that execution only.",
        reason="execution_not_of_run",
    )


def _step_ref(grant: FoundGrant, run: str, step_id: str, index: int | None) -> str | None:
    """The pinned ref the step calls (None: a grant minted before steps were bound names none)."""
    if not grant.steps:
        return None
    found = grant.steps.get(step_id)
    if found is None:
        raise Forbidden(
            f"{run} has no step {step_id!r} in its routine version: its grant calls for its own steps only.",
            reason="step_unknown",
        )
    if found.get("foreach"):
        if index is None or index >= FOREACH_MAX_ITEMS:
            raise Forbidden(
                f"Step {step_id} of {run.lower()} has foreach items: its calls name an index below "
                f"{FOREACH_MAX_ITEMS:,} ({STEP_HEADER}: {step_id}/<index>).",
                reason="step_unknown",
            )
    elif index is not None:
        raise Forbidden(
            f"Step {step_id} of {run.lower()} has no foreach items: its calls name no index.",
            reason="step_unknown",
        )
    return str(found["ref"])


def _check_cleanup(grant: FoundGrant, run: str, step_id: str) -> None:
    """A cancelled run's step may call only as its cleanup, within `CLEANUP_TIME` of the cancel."""
    assert grant.cancelled_at is not None
    if step_id not in grant.cleanup_steps:
        raise Forbidden(
            f"{run} was cancelled: its steps start no new call, but for the steps whose if: calls always() "
            "or cancelled().",
            reason="run_cancelled",
        )
    if utcnow() >= grant.cancelled_at + CLEANUP_TIME:
        raise Forbidden(
            f"{run} was cancelled more than {int(CLEANUP_TIME.total_seconds() // 60)} minutes ago: its "
            f"cleanup step {step_id} starts no new call.",
            reason="run_cancelled",
        )
