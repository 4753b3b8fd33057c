"""The one workflow type that runs every routine: `RoutineWorkflow`, registered as "routine".

Deterministic code only (the Temporal sandbox re-imports this module): no I/O, clock or randomness.
Steps run in order. A step's `if:` false marks it skipped; `foreach` runs one `call_action`
activity per item (at most `FOREACH_PARALLEL` at once, results kept in item order); `timeout`
bounds each attempt and is sent as the call's `timeout_ms`; `retry` becomes the activity's retry
policy (the api's Retry-After still wins, through the activity's `next_retry_delay`). A cancelled
run waits for its running activities to stop (they heartbeat each second) before it ends cancelled.

A step that fails without `continue-on-error` fails the run: the workflow raises a non-retryable
`ApplicationError` of type `StepFailed` whose message reads `step <id> failed: <code> (<reason>):
<message>`, so the Temporal UI shows the run as Failed with that sentence; its details are
`[{"step", "code", "reason", "message"}, <the RunRoutineResult as a dict>]`. The `progress` query
answers the same `RunRoutineResult` shape at any time, during the run and after it.
"""

from __future__ import annotations

import asyncio
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

with workflow.unsafe.imports_passed_through():
    from activities.call_action import CallActionInput, CallActionResult
    from engine import expressions
    from engine.routine import RetryPolicy, Step
    from engine.runs import WORKFLOW_TYPE, RunRoutineInput, RunRoutineResult, StepError, StepResult

FOREACH_PARALLEL = 4
"""Items of one foreach step in flight at once (the api allows 4 calls at once per organization)."""

DEFAULT_ATTEMPT_TIMEOUT = timedelta(seconds=150)
"""An attempt's bound when the step sets no timeout: the action's own (60 s at most) plus the api's work."""

TIMEOUT_SLACK = timedelta(seconds=10)
"""Added to a step's `timeout` for the attempt, so the api's own timeout answer arrives first."""

HEARTBEAT_TIMEOUT = timedelta(seconds=5)
"""An attempt that stops heartbeating (its worker died) is retried after this long."""


def retry_policy(policy: RetryPolicy | None) -> TemporalRetryPolicy:
    """The Temporal retry policy of a step (the routine's defaults when the step sets none)."""
    p = policy or RetryPolicy()
    return TemporalRetryPolicy(
        maximum_attempts=p.max_attempts,
        initial_interval=p.backoff_timedelta,
        backoff_coefficient=p.backoff_coefficient,
        maximum_interval=p.max_backoff_timedelta,
    )


class _StepFailure(Exception):
    """One call of a step failed for good; carries what the run's result shows."""

    def __init__(self, error: StepError, attempts: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.attempts = attempts


@workflow.defn(name=WORKFLOW_TYPE)
class RoutineWorkflow:
    """Runs one routine: its steps in order, then its outputs."""

    def __init__(self) -> None:
        self._result = RunRoutineResult()

    @workflow.query(name="progress")
    def progress(self) -> RunRoutineResult:
        """The run so far: its status, each step's status, attempts, output or error."""
        return self._result

    @workflow.run
    async def run(self, input: RunRoutineInput) -> RunRoutineResult:
        """Run the routine and return its outputs and each step's result.

        Raises:
            ApplicationError: `StepFailed` (non-retryable) when a step without continue-on-error fails,
                `OutputsFailed` when an output expression fails.
        """
        routine = input.routine
        self._result = RunRoutineResult(steps={step.id: StepResult() for step in routine.steps})
        context: dict[str, Any] = {"inputs": input.inputs, "steps": {}}
        try:
            for step in routine.steps:
                state = self._result.steps[step.id]
                await self._run_step(step, state, input, context)
                context["steps"][step.id] = {"output": state.output, "status": state.status}
                if state.status == "failed" and not step.continue_on_error:
                    assert state.error is not None
                    self._result.status = "failed"
                    raise self._run_failure(step.id, state.error)
        except BaseException as exc:
            if not is_cancelled_exception(exc):
                raise
            self._result.status = "cancelled"
            for state in self._result.steps.values():
                if state.status == "running":
                    state.status = "cancelled"
            raise
        try:
            self._result.outputs = expressions.evaluate(dict(routine.outputs), context)
        except expressions.ExpressionError as exc:
            self._result.status = "failed"
            error = {"step": None, "code": "expression_failed", "reason": "outputs", "message": str(exc)}
            raise ApplicationError(
                f"outputs failed: {exc}",
                error,
                self._result.model_dump(mode="json"),
                type="OutputsFailed",
                non_retryable=True,
            ) from None
        self._result.status = "succeeded"
        return self._result

    def _run_failure(self, step_id: str, error: StepError) -> ApplicationError:
        reason = f" ({error.reason})" if error.reason else ""
        details = {"step": step_id, "code": error.code, "reason": error.reason, "message": error.message}
        return ApplicationError(
            f"step {step_id} failed: {error.code}{reason}: {error.message}",
            details,
            self._result.model_dump(mode="json"),
            type="StepFailed",
            non_retryable=True,
        )

    async def _run_step(
        self, step: Step, state: StepResult, input: RunRoutineInput, context: dict[str, Any]
    ) -> None:
        try:
            if not expressions.evaluate_condition(step.if_, context):
                state.status = "skipped"
                return
            items = None if step.foreach is None else expressions.evaluate_foreach(step.foreach, context)
        except expressions.ExpressionError as exc:
            self._fail(
                state,
                StepError(code="expression_failed", reason="if" if step.if_ else "foreach", message=str(exc)),
                0,
            )
            return
        state.status = "running"
        try:
            if items is None:
                state.ref = input.pins.get(step.uses, step.uses)
                result = await self._call(step, input, context, None)
                state.output, state.attempts = result.output, result.attempt
                state.ref = result.ref or state.ref
            else:
                state.ref = input.pins.get(step.uses, step.uses)
                await self._run_foreach(step, state, input, context, items)
                return
        except _StepFailure as failure:
            self._fail(state, failure.error, failure.attempts)
            return
        state.status = "succeeded"

    async def _run_foreach(
        self, step: Step, state: StepResult, input: RunRoutineInput, context: dict[str, Any], items: list[Any]
    ) -> None:
        gate = asyncio.Semaphore(FOREACH_PARALLEL)

        async def one(index: int, item: Any) -> CallActionResult:
            async with gate:
                return await self._call(step, input, {**context, "item": item, "index": index}, index)

        calls = (one(i, item) for i, item in enumerate(items))
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        outputs: list[Any] = []
        first: _StepFailure | None = None
        attempts = 0
        for outcome in outcomes:
            if isinstance(outcome, _StepFailure):
                first = first or outcome
                attempts = max(attempts, outcome.attempts)
                outputs.append(None)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                attempts = max(attempts, outcome.attempt)
                outputs.append(outcome.output)
        state.output, state.attempts = outputs, attempts
        if first is not None:
            self._fail(state, first.error, attempts)
        else:
            state.status = "succeeded"

    @staticmethod
    def _fail(state: StepResult, error: StepError, attempts: int) -> None:
        state.status, state.error, state.attempts = "failed", error, attempts

    async def _call(
        self, step: Step, input: RunRoutineInput, context: dict[str, Any], index: int | None
    ) -> CallActionResult:
        """Run one call of a step as an activity; a failure for good becomes `_StepFailure`."""
        label = step.id if index is None else f"{step.id}[{index}]"
        try:
            call_input = expressions.evaluate(dict(step.with_), context)
            timeout = step.timeout_timedelta
            policy = retry_policy(step.retry)
        except (expressions.ExpressionError, ValueError) as exc:
            error = StepError(code="expression_failed", reason="with", message=str(exc))
            raise _StepFailure(error, 0) from None
        try:
            return await workflow.execute_activity(
                "call_action",
                CallActionInput(
                    ref=input.pins.get(step.uses, step.uses),
                    input=call_input,
                    key_id=input.key_id,
                    step_id=step.id,
                    index=index,
                    timeout_ms=int(timeout.total_seconds() * 1000) if timeout else None,
                ),
                result_type=CallActionResult,
                activity_id=step.id if index is None else f"{step.id}-{index}",
                summary=f"{label} · {input.pins.get(step.uses, step.uses)}",
                start_to_close_timeout=timeout + TIMEOUT_SLACK if timeout else DEFAULT_ATTEMPT_TIMEOUT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=policy,
                # a cancelled run waits until the running call has stopped (it heartbeats every second)
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            raise _StepFailure(*_step_error(exc, policy)) from None


def _step_error(exc: ActivityError, policy: TemporalRetryPolicy) -> tuple[StepError, int]:
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
