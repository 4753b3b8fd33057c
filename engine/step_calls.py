"""A step's calls: made as activities (`StepCaller`, for a run's workflow and a foreach's child workflows
alike), retried as Temporal retries them (`retry_policy`), named as the Temporal UI shows them (`summary`)
and read as the run reads them once they failed for good (`step_error`). Workflow code: deterministic, no
I/O."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

import engine.expressions as expressions
import engine.payloads as payloads
from engine.pacing import Pacer
from engine.routine import RetryPolicy, Step
from engine.runs import StepError
from engine.scope import Scope
from engine.steps import CALL_ACTION, CallActionInput, CallActionResult

FOREACH_PARALLEL = 4
"""Items of one foreach step in flight at once (the api allows 4 calls at once per organization)."""

HISTORY_EVENTS_BUDGET = 40_000
"""No call starts once the run's history has this many events (Temporal ends a run at 51,200)."""

HISTORY_BYTES_BUDGET = 40 * payloads.MIB
"""No call starts that would take the run's history past this size (Temporal ends a run at 50 MiB)."""

DEFAULT_ATTEMPT_TIMEOUT = timedelta(seconds=150)
"""An attempt's bound when the step sets no timeout: the action's own (60 s at most) plus the api's work."""

TIMEOUT_SLACK = timedelta(seconds=10)
"""Added to a step's `timeout` for the attempt, so the api's own timeout answer arrives first."""

HEARTBEAT_TIMEOUT = timedelta(seconds=5)
"""An attempt that stops heartbeating (its worker died) is retried after this long."""

WAITS_PER_STEP = 100
"""429/503 refusals a call may wait out beyond its max-attempts before the step fails."""

SUMMARY_BYTES = 256
"""The longest activity summary (UTF-8 bytes; a longer `name:` is cut): the Temporal server limits a
summary's size (its MaxUserMetadataSummarySize), and a workflow command it refuses would fail the run's
workflow task."""


def summary(step_id: str, name: str | None, index: int | None, ref: str) -> str:
    """What the Temporal UI shows for a step's call: `Fetch the weather (weather) · ns/pack/action@1`,
    `weather[2] · ...` for an item of a foreach, the step's id alone when it has no `name:`.

    Temporal keeps it in the command's user metadata, which replay does not compare (a run recorded with
    another summary replays: tests/engine/test_history_replay.py)."""
    label = step_id if index is None else f"{step_id}[{index}]"
    text = f"{name} ({label}) · {ref}" if name else f"{label} · {ref}"
    return text.encode()[:SUMMARY_BYTES].decode(errors="ignore")


def retry_policy(policy: RetryPolicy | None) -> TemporalRetryPolicy:
    """The Temporal retry policy of a step (the routine's defaults when the step sets none).

    Raises:
        ValueError: a policy Temporal would refuse (the sentence says which value).
    """
    p = policy or RetryPolicy()
    backoff, longest = p.backoff_timedelta, p.max_backoff_timedelta
    if p.max_attempts < 1:
        raise ValueError(f"max-attempts is {p.max_attempts}; it must be at least 1")
    if backoff <= timedelta(0):
        raise ValueError("backoff must be longer than 0")
    if longest < backoff:
        raise ValueError(f"max-backoff ({longest}) is shorter than backoff ({backoff})")
    if p.backoff_coefficient < 1:
        raise ValueError(f"backoff-coefficient is {p.backoff_coefficient}; it must be at least 1")
    return TemporalRetryPolicy(
        # the step's max-attempts is counted by the activity (activities.call_action.Ledger), where a
        # 429/503 that asks to wait is not a failure; Temporal's own bound only stops endless waiting
        maximum_attempts=p.max_attempts + WAITS_PER_STEP,
        initial_interval=backoff,
        backoff_coefficient=p.backoff_coefficient,
        maximum_interval=longest,
    )


def step_error(exc: ActivityError, policy: TemporalRetryPolicy) -> tuple[StepError, int]:
    """The code, reason and sentence of an activity that failed for good, and its attempts."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
        fields = dict(cause.details[0])
        attempts = int(fields.pop("attempt", 0) or 0)
        for name in ("status", "idempotency_key"):
            fields.pop(name, None)
        fields.setdefault("code", cause.type or "activity_failed")
        fields.setdefault("message", cause.message)
        return StepError.model_validate(fields), attempts
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower() if cause.type is not None else "timeout"
        message = f"the step's call did not finish in time ({kind})"
        return StepError(code="step_timed_out", reason=kind, message=message), policy.maximum_attempts
    if isinstance(cause, CancelledError):
        return StepError(code="cancelled", reason=None, message="the step's call was cancelled"), 0
    text = str(cause) if cause is not None else str(exc)
    return StepError(code="activity_failed", reason=type(cause).__name__ if cause else None, message=text), 0


class StepFailure(Exception):
    """One call of a step failed for good; carries what the run's result shows."""

    def __init__(self, error: StepError, attempts: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.attempts = attempts


@dataclass(frozen=True)
class RunCalls:
    """What every call of a run carries: the key it is made for, the run's grant, the run's pins, and the
    run's workflow id when the calls come from a foreach's child workflow (None: the run's own)."""

    key_id: str
    grant: str | None
    pins: dict[str, str] = field(default_factory=dict)
    run_workflow_id: str | None = None


class StepCaller:
    """Makes a run's step calls as `call_action` activities, its expressions paced by one Pacer."""

    def __init__(self, pacer: Pacer, run: RunCalls) -> None:
        self._pacer = pacer
        self._run = run

    async def items(
        self, step: Step, scope: Scope, items: list[Any], first: int = 0
    ) -> list[CallActionResult | StepFailure]:
        """Call `step` once per item (item `i` has index `first + i`), at most `FOREACH_PARALLEL` at once;
        each call's result or failure, in item order (a cancellation is raised)."""
        gate = asyncio.Semaphore(FOREACH_PARALLEL)

        async def one(index: int, item: Any) -> CallActionResult:
            async with gate:
                return await self.call(step, scope.with_names({"item": item, "index": index}), index)

        calls = (one(first + i, item) for i, item in enumerate(items))
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, StepFailure):
                raise outcome
        return outcomes  # type: ignore[return-value]

    async def call(self, step: Step, scope: Scope, index: int | None) -> CallActionResult:
        """Run one call of a step as an activity; a failure for good becomes `StepFailure`."""
        with_ = "with:" if index is None else f"with: of item {index}"
        ref = self._run.pins.get(step.uses, step.uses)
        fields = dict(step.with_)
        try:
            call_input = await self._pacer.evaluate(fields, lambda b: expressions.evaluate(fields, scope, b))
        except Exception as exc:  # an ExpressionError, or anything the evaluation did not foresee
            error = StepError(code="expression_failed", reason="with", message=sentence(exc))
            raise StepFailure(error, 0) from None
        try:
            size = payloads.measure(call_input, with_, payloads.CALL_INPUT_LIMIT_BYTES).size
        except payloads.PayloadError as exc:
            raise StepFailure(StepError(code=exc.code, reason="with", message=exc.message), 0) from None
        try:
            policy = retry_policy(step.retry)
        except ValueError as exc:
            raise StepFailure(StepError(code="retry_invalid", reason="retry", message=str(exc)), 0) from None
        check_history(size, "foreach" if index is not None else "with")
        timeout = step.timeout_timedelta
        try:
            return await workflow.execute_activity(
                CALL_ACTION,
                CallActionInput(
                    ref=ref,
                    input=call_input,
                    key_id=self._run.key_id,
                    grant=self._run.grant,
                    step_id=step.id,
                    index=index,
                    timeout_ms=int(timeout.total_seconds() * 1000) if timeout else None,
                    max_attempts=(step.retry or RetryPolicy()).max_attempts,
                    run_workflow_id=self._run.run_workflow_id,
                ),
                result_type=CallActionResult,
                activity_id=step.id if index is None else f"{step.id}-{index}",
                summary=summary(step.id, step.name, index, ref),
                start_to_close_timeout=timeout + TIMEOUT_SLACK if timeout else DEFAULT_ATTEMPT_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=policy,
                # a cancelled run waits until the running call has stopped (it heartbeats every second)
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            raise StepFailure(*step_error(exc, policy)) from None


def check_history(adding: int, reason: str) -> None:
    """Refuse to start a call (or a child workflow) once the history nears what Temporal lets a run hold.

    Raises:
        StepFailure: `history_too_large`, with the history's events and size.
    """
    info = workflow.info()
    events, size = info.get_current_history_length(), info.get_current_history_size()
    if events < HISTORY_EVENTS_BUDGET and size + adding <= HISTORY_BYTES_BUDGET:
        return
    message = (
        f"the run's Temporal history holds {events:,} events ({payloads.size_text(size)}); Temporal ends a "
        f"run at {payloads.HISTORY_EVENTS_LIMIT:,} events or "
        f"{payloads.size_text(payloads.HISTORY_SIZE_LIMIT_BYTES)}, so no more calls start: "
        "split the work across runs"
    )
    raise StepFailure(StepError(code="history_too_large", reason=reason, message=message), 0)


def output_size(result: CallActionResult) -> int:
    """A call's output size, as the activity measured it (or measured here)."""
    if result.output_bytes is not None:
        return result.output_bytes
    return len(payloads.encode(result.output))


def sentence(exc: Exception) -> str:
    """An evaluation's failure as a sentence (an unforeseen one names its kind)."""
    if isinstance(exc, expressions.ExpressionError):
        return str(exc)
    return f"the evaluation failed: {type(exc).__name__}: {exc}"
