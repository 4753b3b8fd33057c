"""A foreach of more items than one history carries: its items in child workflows, one chunk each.

Each item of a foreach adds about five events to its run's Temporal history, which Temporal ends at
51,200. A step of at most `FOREACH_CHUNK_ITEMS` items runs its calls in the run's own workflow; a step of
more (up to `FOREACH_MAX_ITEMS`) runs them in child workflows of `FOREACH_CHUNK_ITEMS` items each, one
chunk after the other (so at most `FOREACH_PARALLEL` calls of the step run at once, as in the run's own
workflow), each child visible in the Temporal UI as `<run's workflow id>/foreach/<step id>/<chunk>`.

`run_chunks` is the run's side: it hands each child the step, its items, and of the run's scope only
what the step's `with:` reads (`chunk_names`), and gives back every item's outcome in item order.
`ForeachWorkflow` is the child: it makes the calls exactly as the run's workflow would (engine.step_calls),
under the run's grant and with the run's idempotency keys, and returns each item's output or error. The
api honours a child's calls as the run's own once Temporal says the child's parent is the run's execution
(api.runs.links); nothing of that is taken from the child's input.

A chunk's outputs travel back in its result, one Temporal payload: a chunk whose outputs do not fit
fails the step with `payload_too_large (foreach)`; a child that fails or is terminated fails the step
with its sentence, and no later chunk starts. A cancelled run cancels the chunk under way (its calls stop
as the run's own would). Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    import engine.expressions as expressions
    import engine.payloads as payloads
    from engine.pacing import Pacer
    from engine.routine import Step
    from engine.runs import (
        FOREACH_CHUNK_ITEMS,
        FOREACH_WORKFLOW_TYPE,
        ForeachChunkInput,
        ForeachChunkResult,
        ItemOutcome,
        StepError,
        foreach_workflow_id,
    )
    from engine.scope import Scope
    from engine.step_calls import RunCalls, StepCaller, StepFailure, check_history, output_size
    from engine.steps import CallActionResult

CHUNK_RESULT_LIMIT_BYTES = payloads.PAYLOAD_LIMIT_BYTES - 64 * payloads.KIB
"""The most a chunk's result (its items' outputs) may take: one Temporal payload, with room to spare."""

CHUNK_FAILED = "ForeachChunkFailed"
"""The type of the error a chunk ends with when it cannot return its items (its details: the StepError)."""


@workflow.defn(name=FOREACH_WORKFLOW_TYPE)
class ForeachWorkflow:
    """Calls one chunk of a foreach step's items, as its run's workflow would."""

    @workflow.run
    async def run(self, input: ForeachChunkInput) -> ForeachChunkResult:
        """Each item's output or error, in item order.

        Raises:
            ApplicationError: non-retryable, `ForeachChunkFailed`: the items' outputs do not fit in
                the chunk's result.
        """
        run = RunCalls(
            key_id=input.key_id, grant=input.grant, pins=input.pins, run_workflow_id=input.run_workflow_id
        )
        calls = StepCaller(Pacer(), run)
        outcomes = await calls.items(input.step, Scope(input.names), input.items, input.first)
        result = ForeachChunkResult(
            step_id=input.step.id, first=input.first, items=[_outcome(o) for o in outcomes]
        )
        what = f"what items {input.first}..{input.first + len(input.items) - 1} output"
        try:
            payloads.measure(result.model_dump(mode="json"), what, CHUNK_RESULT_LIMIT_BYTES)
        except payloads.PayloadError as exc:
            message = (
                f"{exc.message}: a foreach of more than {FOREACH_CHUNK_ITEMS:,} items carries each "
                f"{FOREACH_CHUNK_ITEMS:,} items' outputs in one Temporal payload; return less of each item "
                "(files through a later step, say)"
            )
            error = StepError(code=exc.code, reason="foreach", message=message)
            details = error.model_dump()
            raise ApplicationError(error.message, details, type=CHUNK_FAILED, non_retryable=True) from None
        return result


def _outcome(outcome: CallActionResult | StepFailure) -> ItemOutcome:
    if isinstance(outcome, StepFailure):
        return ItemOutcome(error=outcome.error, attempts=outcome.attempts)
    return ItemOutcome(
        output=outcome.output, output_bytes=output_size(outcome), attempts=outcome.attempt, ref=outcome.ref
    )


class _ChunkFailed(Exception):
    """A chunk ended without its items (it failed, or was terminated): the step fails with its error."""

    def __init__(self, error: StepError) -> None:
        super().__init__(error.message)
        self.error = error


async def run_chunks(
    step: Step, scope: Scope, items: list[Any], run: RunCalls
) -> list[CallActionResult | StepFailure]:
    """Run a foreach step's items in child workflows of `FOREACH_CHUNK_ITEMS` each, one after the other.

    Returns:
        Each item's result or failure, in item order (the items of a chunk that ended without them,
        and of every chunk after it, which do not start, carry its failure).

    Raises:
        StepFailure: a chunk's input does not fit in a Temporal payload, or the history is full.
    """
    assert run.run_workflow_id is not None
    names = chunk_names(step, scope)
    outcomes: list[CallActionResult | StepFailure] = []
    for chunk, first in enumerate(range(0, len(items), FOREACH_CHUNK_ITEMS)):
        chunk_input = ForeachChunkInput(
            step=step,
            names=names,
            items=items[first : first + FOREACH_CHUNK_ITEMS],
            first=first,
            key_id=run.key_id,
            grant=run.grant,
            pins=run.pins,
            run_workflow_id=run.run_workflow_id,
        )
        try:
            outcomes.extend(await _chunk(step, chunk_input, chunk, run.run_workflow_id))
        except _ChunkFailed as failed:
            outcomes.extend(StepFailure(failed.error, 0) for _ in items[first:])
            break
    return outcomes


async def _chunk(
    step: Step, chunk_input: ForeachChunkInput, chunk: int, run_workflow_id: str
) -> list[CallActionResult | StepFailure]:
    """One chunk's outcomes, from its child workflow.

    Raises:
        StepFailure: the chunk's input does not fit in a Temporal payload, or the history is full.
        _ChunkFailed: the child ended without its items.
    """
    first, last = chunk_input.first, chunk_input.first + len(chunk_input.items) - 1
    what = f"the input of items {first}..{last} (the items and what with: reads)"
    try:
        size = payloads.measure(chunk_input.model_dump(mode="json"), what, CHUNK_RESULT_LIMIT_BYTES).size
    except payloads.PayloadError as exc:
        raise StepFailure(StepError(code=exc.code, reason="foreach", message=exc.message), 0) from None
    check_history(size, "foreach")
    try:
        result = await workflow.execute_child_workflow(
            FOREACH_WORKFLOW_TYPE,
            chunk_input,
            id=foreach_workflow_id(run_workflow_id, step.id, chunk),
            result_type=ForeachChunkResult,
            static_summary=f"{step.id}[{first}..{last}]",
        )
    except ChildWorkflowError as exc:
        if is_cancelled_exception(exc):
            raise
        raise _ChunkFailed(_chunk_error(exc)) from None
    return [_item(item) for item in result.items]


def _item(item: ItemOutcome) -> CallActionResult | StepFailure:
    if item.error is not None:
        return StepFailure(item.error, item.attempts)
    return CallActionResult(
        output=item.output, output_bytes=item.output_bytes, attempt=item.attempts, ref=item.ref
    )


def _chunk_error(exc: ChildWorkflowError) -> StepError:
    """The sentence of a chunk that ended without its items: its own error, or how it ended."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type == CHUNK_FAILED and cause.details:
        return StepError.model_validate(cause.details[0])
    message = f"the child workflow running its items ended without them: {cause or exc}"
    return StepError(code="workflow_error", reason="foreach", message=message)


def chunk_names(step: Step, scope: Scope) -> dict[str, Any]:
    """What a chunk needs of the run's scope: every name but `steps`, and of `steps` the steps that the
    step's `with:` names (all of them when it reads `steps` whole, or when its expressions cannot be read)."""
    names = scope.values()
    read: set[str] = set()
    try:
        for expr in expressions.iter_expressions(step.with_):
            for ref in expressions.references(expr):
                if ref.root == "steps" and not ref.path:
                    return names
                if ref.root == "steps":
                    read.add(ref.path[0])
    except Exception:  # checked at store; should it still not parse, its calls say so
        return names
    steps = names.get("steps") or {}
    names["steps"] = {sid: value for sid, value in steps.items() if sid in read}
    return names
