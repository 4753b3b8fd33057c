"""The one workflow type that runs every routine: `RoutineWorkflow`, registered as "routine".

Deterministic code only: no I/O, clock or randomness (the worker's sandbox passes this module through
instead of importing it again for each run, engine.worker.workflow_runner; the replay tests run it in
the default sandbox, which refuses them).
A step starts once the steps it needs have ended (`needs:`; without it, the step before it), in file
order, while fewer than the routine's `max-parallel` steps run: steps that do not need each other
run at once, as concurrent activities. A step's `if:` false marks it skipped; an `if:` that calls
no status function runs only when `success()` too (no step it needs, directly or through others,
failed without continue-on-error or was cancelled), so a step after a failure is skipped unless its
`if:` asks for it (`failure()`, `always()`). A cancelled run cancels its running steps, then runs
the steps whose `if:` asks for it (`always()`, `cancelled()`), then ends cancelled. `foreach` runs one
`call_action` activity per item (engine.step_calls: at most `FOREACH_PARALLEL` at once, results kept in
item order, at most `FOREACH_MAX_ITEMS` items; more than `FOREACH_CHUNK_ITEMS` in child workflows of that
many items each, engine.foreach); `timeout` bounds each attempt and is sent as the call's `timeout_ms`;
`retry` becomes the activity's retry policy (the api's Retry-After still wins, through the
activity's `next_retry_delay`). A cancelled run waits for its running activities to stop (they
heartbeat each second) before it ends cancelled.

Every run ends. What goes wrong inside the workflow fails the step (or the run) with a code and a
sentence, never the workflow task (which Temporal would retry forever): an expression that fails or
passes its bounds (`expression_failed`), a call input (`with:`) or the run's outputs over their
payload limits or not encodable (`payload_too_large`, `payload_invalid`, engine.payloads), a foreach
over too many items (`too_many_items`), a history near Temporal's limits (`history_too_large`: no
more calls start), a retry policy Temporal refuses (`retry_invalid`); anything else is
`workflow_error`. Each expression's scope is converted to CEL once a run (engine.scope).

A step that fails without `continue-on-error` fails the run (once every step has ended: steps that do
not depend on it go on, and the steps whose `if:` asks for it run): the workflow raises a non-retryable
`ApplicationError` of type `StepFailed` whose message reads `step <id> failed: <code> (<reason>):
<message>`, so the Temporal UI shows the run as Failed with that sentence; its details are
`[{"step", "code", "reason", "message"}, <the RunRoutineResult as a dict>]`.

A re-run (`RunRoutineInput.reused`) ends the steps it keeps at once, before any other starts, with
their old status, attempts, pin and output (`reused: true`), and calls nothing for them; the other
steps run as in any run, under this run's own idempotency keys (behind `PATCH_RERUN`). The `progress` query
answers the same `RunRoutineResult` shape at any time, during the run and after it. Step outputs
travel in that result while they total at most `OUTPUTS_IN_RESULT_BYTES`; a step whose output does
not fit there has `output` null and `output_bytes` set (its output stays in the step's activity
result in the history, where the runs api reads it once the run has ended).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, TemporalError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    # `import a.b as b`, not `from a import b`: a submodule imported by `from` bypasses the sandbox's
    # importer and would be loaded again for each run (its compiled expressions with it)
    import engine.expressions as expressions
    import engine.payloads as payloads
    from engine.foreach import run_chunks
    from engine.pacing import Pacer
    from engine.routine import Routine, Step
    from engine.run_failures import (
        RESULT_LIMIT_BYTES,
        RunFailure,
        largest_output,
        outputs_failure,
        run_details,
        step_failure,
    )
    from engine.runs import (
        FOREACH_CHUNK_ITEMS,
        FOREACH_MAX_ITEMS,
        WORKFLOW_TYPE,
        RunRoutineInput,
        RunRoutineResult,
        StepError,
        StepResult,
    )
    from engine.scope import Scope
    from engine.step_calls import RunCalls, StepCaller, StepFailure, output_size, sentence
    from engine.step_graph import transitive_needs

PATCH_NEEDS = "routines-v2-needs"
"""The `workflow.patched` id of routines v2 (needs:, status functions): a run started before it (its
history has no marker) keeps v1's behaviour: it ends at the first step that fails, or at once when
cancelled, leaving the steps it did not reach pending."""

PATCH_RERUN = "routines-v3-rerun"
"""The `workflow.patched` id of re-runs (RunRoutineInput.reused), marked only in a run that reuses steps
(ordinary runs record no marker, so they still replay on older workers): a worker that predates re-runs
and takes a later task of a re-run fails it (Temporal hands it to a newer worker)."""

PATCH_CANCEL_REFUSED = "routines-v8-cancel-refused"
"""A step (no cleanup step) whose call the api refused because the run was cancelled (403
`run_cancelled`: the cancel reached the api first) is `cancelled`, not `failed`. Marked only in a run where
that happens; runs started before record it as they did."""

OUTPUTS_IN_RESULT_BYTES = 512 * payloads.KIB
"""Step outputs carried in the run's result and progress, in all (the rest stay in the history)."""


@workflow.defn(name=WORKFLOW_TYPE)
class RoutineWorkflow:
    """Runs one routine: its steps in order, then its outputs."""

    def __init__(self) -> None:
        self._result = RunRoutineResult()
        self._shown_bytes = 0
        self._step: str | None = None
        self._cancelled = False  # what cancelled() answers
        self._failed: list[str] = []  # the steps that failed, in the order they ended
        self._pacer = Pacer()  # spreads the expressions' work over workflow tasks
        self._calls = StepCaller(self._pacer, RunCalls(key_id="", grant=None))  # the run's, set by _run

    @workflow.query(name="progress")
    def progress(self) -> RunRoutineResult:
        """The run so far: its status, each step's status, attempts, output or error."""
        return self._result

    @workflow.run
    async def run(self, input: RunRoutineInput) -> RunRoutineResult:
        """Run the routine and return its outputs and each step's result.

        Raises:
            ApplicationError: non-retryable: `StepFailed` when a step without continue-on-error fails,
                `OutputsFailed` when the outputs fail, `WorkflowError` on anything unforeseen.
        """
        try:
            return await self._run(input)
        except RunFailure as failure:
            raise failure.error from None
        except Exception as exc:
            if isinstance(exc, TemporalError):  # our ApplicationErrors; Temporal's own (nondeterminism)
                raise
            # A fault of ours must end the run with a sentence, not fail its workflow task forever.
            self._result.status = "failed"
            message = f"the run stopped inside its workflow: {type(exc).__name__}: {exc}"
            error = {"step": self._step, "code": "workflow_error", "reason": None, "message": message}
            raise ApplicationError(
                message, error, run_details(self._result), type="WorkflowError", non_retryable=True
            ) from None

    async def _run(self, input: RunRoutineInput) -> RunRoutineResult:
        routine = input.routine
        self._calls = StepCaller(self._pacer, RunCalls(input.key_id, input.grant, input.pins))
        self._result = RunRoutineResult(steps={s.id: StepResult(name=s.name) for s in routine.steps})
        names: dict[str, Any] = {"inputs": input.inputs, "steps": {}}
        # the event that started the run ({} in the routine's other runs; absent in routines without a
        # trigger, so that older histories replay as they ran)
        if input.event is not None or routine.event_triggers:
            names["event"] = input.event or {}
        scope = Scope(names)
        # Before the first command: a run started by a v1 worker replays without the marker.
        v2 = workflow.patched(PATCH_NEEDS)
        cancel = await self._run_steps(routine, input, scope, v2)
        if cancel is not None:
            self._result.status = "cancelled"
            raise cancel
        failed = next((s for s in self._failed if not routine.step(s).continue_on_error), None)
        if failed is not None:
            error = self._result.steps[failed].error
            assert error is not None
            self._result.status = "failed"
            raise step_failure(failed, error, self._result)
        self._step = None
        self._result.outputs = await self._outputs(routine, scope)
        self._result.status = "succeeded"
        try:
            payloads.measure(self._result.model_dump(mode="json"), "the run's result", RESULT_LIMIT_BYTES)
        except payloads.PayloadError as exc:
            self._result.status = "failed"
            raise outputs_failure(self._result, exc.code, "result", exc.message) from None
        return self._result

    async def _run_steps(
        self, routine: Routine, input: RunRoutineInput, scope: Scope, v2: bool
    ) -> BaseException | None:
        """Run the steps, each once its needs have ended, at most `max-parallel` at once.

        Returns:
            The cancellation to raise when the run was cancelled (after its always()/cancelled() steps).
        """
        needs = routine.step_needs()
        above = transitive_needs(needs)
        waiting = list(routine.steps)
        running: dict[str, asyncio.Task[Any]] = {}
        ended: list[str] = []  # steps whose task has ended, in the order they ended
        # what success() and failure() read: a failure with continue-on-error counts as a success
        concluded: dict[str, str] = {}
        cancel: BaseException | None = None
        if input.reused and workflow.patched(PATCH_RERUN):
            for step in list(waiting):
                if self._reuse(step, input, scope):
                    waiting.remove(step)
                    concluded[step.id] = self._result.steps[step.id].status

        async def one(step: Step, status: dict[str, bool]) -> Any:
            try:
                return await self._run_step(step, self._result.steps[step.id], input, scope, status)
            finally:
                ended.append(step.id)

        while waiting or running:
            for step in list(waiting) if cancel is None or v2 else []:
                if len(running) >= routine.max_parallel:
                    break
                if any(n not in concluded for n in needs[step.id]):
                    continue
                waiting.remove(step)
                self._step = step.id
                before = [concluded.get(n, "pending") for n in sorted(above[step.id])]
                status = {
                    "success": not self._cancelled and not any(c in ("failed", "cancelled") for c in before),
                    "failure": "failed" in before,
                    "always": True,
                    "cancelled": self._cancelled,
                }
                running[step.id] = asyncio.create_task(one(step, status))
            if not running:
                break  # only with needs the validator refuses (a cycle): those steps stay pending
            try:
                await workflow.wait_condition(lambda: bool(ended))
            except BaseException as exc:
                if not is_cancelled_exception(exc) or cancel is not None:
                    raise
                # Cancel the running steps; wait until their calls have stopped (they heartbeat).
                cancel, self._cancelled = exc, True
                for task in running.values():
                    task.cancel()
                continue
            while ended:
                step_id = ended.pop(0)
                self._step = step_id
                state = self._result.steps[step_id]
                try:
                    output = running.pop(step_id).result()
                except BaseException as exc:
                    if not is_cancelled_exception(exc) or cancel is None:
                        raise
                    output, state.status = None, "cancelled"
                scope.set_member("steps", step_id, {"output": output, "status": state.status})
                concluded[step_id] = state.status
                if state.status == "failed":
                    self._failed.append(step_id)
                    if routine.step(step_id).continue_on_error:
                        concluded[step_id] = "succeeded"
                    elif not v2:
                        return None  # v1: the run ends at its first failure
            if cancel is not None and not v2:
                if not running:
                    return cancel  # v1: the run ends once its running step has stopped
                continue
        return cancel

    def _reuse(self, step: Step, input: RunRoutineInput, scope: Scope) -> bool:
        """End a step a re-run keeps (succeeded or skipped in the run it re-runs) with what it had then."""
        kept = input.reused.get(step.id)
        if kept is None or kept.status not in ("succeeded", "skipped"):
            return False
        state = StepResult(
            name=step.name, status=kept.status, attempts=kept.attempts, ref=kept.ref, reused=True
        )
        self._result.steps[step.id] = state
        output = kept.output if kept.status == "succeeded" else None
        if kept.status == "succeeded":
            self._show(state, output, len(payloads.encode(output)))
        scope.set_member("steps", step.id, {"output": output, "status": state.status})
        return True

    async def _outputs(self, routine: Routine, scope: Scope) -> dict[str, Any]:
        """The routine's outputs, evaluated and checked against RUN_OUTPUTS_LIMIT_BYTES."""
        fields = dict(routine.outputs)
        try:
            outputs: dict[str, Any] = await self._pacer.evaluate(
                fields, lambda budget: expressions.evaluate(fields, scope, budget)
            )
        except Exception as exc:  # an ExpressionError, or anything the evaluation did not foresee
            self._result.status = "failed"
            raise outputs_failure(self._result, "expression_failed", "outputs", sentence(exc)) from None
        try:
            payloads.measure(outputs, "outputs", payloads.RUN_OUTPUTS_LIMIT_BYTES)
        except payloads.PayloadError as exc:
            self._result.status = "failed"
            raise outputs_failure(
                self._result, exc.code, "outputs", f"{exc.message}{largest_output(outputs)}"
            ) from None
        return outputs

    async def _run_step(
        self, step: Step, state: StepResult, input: RunRoutineInput, scope: Scope, status: dict[str, bool]
    ) -> Any:
        """Run one step; its output (what later expressions read), or None.

        `status` holds what the status functions of its `if:` answer; an `if:` that calls none runs
        the step only when `success()` too.
        """
        field, pace = "if", self._pacer.evaluate
        statuses = status if expressions.uses_status(step.if_) else None  # without: success() too
        try:
            run = (statuses is not None or status["success"]) and await pace(
                step.if_, lambda b: expressions.evaluate_condition(step.if_, scope, statuses, b)
            )
            if not run:
                state.status = "skipped"
                return None
            field, foreach = "foreach", step.foreach
            items = (
                None
                if foreach is None
                else await pace(
                    foreach, lambda b: expressions.evaluate_foreach(foreach, scope, FOREACH_MAX_ITEMS, b)
                )
            )
        except expressions.TooManyItems as exc:
            self._fail(state, StepError(code="too_many_items", reason="foreach", message=str(exc)), 0)
            return None
        except Exception as exc:  # an ExpressionError, or anything the evaluation did not foresee
            self._fail(state, StepError(code="expression_failed", reason=field, message=sentence(exc)), 0)
            return None
        state.status = "running"
        state.ref = input.pins.get(step.uses, step.uses)
        if items is not None:
            return await self._run_foreach(step, state, input, scope, items)
        try:
            result = await self._calls.call(step, scope, None)
        except StepFailure as failure:
            self._call_failed(step, state, failure.error, failure.attempts)
            return None
        state.attempts = result.attempt
        state.ref = result.ref or state.ref
        self._show(state, result.output, output_size(result))
        state.status = "succeeded"
        return result.output

    async def _run_foreach(
        self, step: Step, state: StepResult, input: RunRoutineInput, scope: Scope, items: list[Any]
    ) -> list[Any] | None:
        try:
            if len(items) <= FOREACH_CHUNK_ITEMS:
                outcomes = await self._calls.items(step, scope, items)
            else:  # more than one history carries: in child workflows (engine.foreach)
                run = RunCalls(input.key_id, input.grant, input.pins, workflow.info().workflow_id)
                outcomes = await run_chunks(step, scope, items, run)
        except StepFailure as failure:
            self._fail(state, failure.error, failure.attempts)
            return None
        outputs: list[Any] = []
        first: StepFailure | None = None
        attempts, size = 0, 2 + max(len(outcomes) - 1, 0)  # the list's brackets and commas
        for outcome in outcomes:
            if isinstance(outcome, StepFailure):
                first = first or outcome
                attempts = max(attempts, outcome.attempts)
                outputs.append(None)
                size += 4
            else:
                attempts = max(attempts, outcome.attempt)
                outputs.append(outcome.output)
                size += output_size(outcome)
        state.attempts = attempts
        self._show(state, outputs, size)
        if first is not None:
            self._call_failed(step, state, first.error, attempts)
        else:
            state.status = "succeeded"
        return outputs

    def _show(self, state: StepResult, output: Any, size: int) -> None:
        """Put a step's output in the run's result while they fit in OUTPUTS_IN_RESULT_BYTES."""
        if self._shown_bytes + size <= OUTPUTS_IN_RESULT_BYTES:
            state.output = output
            self._shown_bytes += size
        else:
            state.output, state.output_bytes = None, size

    @staticmethod
    def _fail(state: StepResult, error: StepError, attempts: int) -> None:
        state.status, state.error, state.attempts = "failed", error, attempts

    @classmethod
    def _call_failed(cls, step: Step, state: StepResult, error: StepError, attempts: int) -> None:
        """A step's call failed for good: the step failed, unless the api refused the call because the run
        was cancelled (the cancel reached the api first) and the step is no cleanup step (a cleanup step is
        refused so once its own time after the cancel has passed: that is its failure)."""
        refused = (error.code, error.reason) == ("forbidden", "run_cancelled")
        if refused and not expressions.runs_after_cancel(step.if_) and workflow.patched(PATCH_CANCEL_REFUSED):
            state.status, state.error, state.attempts = "cancelled", None, attempts
            return
        cls._fail(state, error, attempts)
