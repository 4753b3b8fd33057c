"""Re-runs: which step a re-run starts from, and which steps of the old run it keeps.

`POST /v1/runs/{id}/rerun {"from"?: "<step id>"}` starts a new run of the old run's routine version,
with its inputs and pins; the point is `from`, or else the first step (in file order) that failed or
was cancelled. The new run keeps a step of the old run (its status, attempts, pin and output, without
calling it) when:

- it succeeded or was skipped in the old run;
- it is not the point, nor downstream of it: it does not need the point, directly or through others
  (`needs:`; a step without `needs:` needs the step before it, so in a routine without `needs:` every
  step after the point runs again);
- every step it needs, directly or through others, is kept too (a kept step read only what the new
  run shows for the steps it needs).

Every other step runs as in any run, under the new run's idempotency keys.
"""

from __future__ import annotations

from api.errors import Conflict, InvalidRequest
from engine.routine import Routine
from engine.runs import RunRoutineResult, StepResult
from engine.step_graph import transitive_needs

KEPT_STATUSES = ("succeeded", "skipped")
POINT_STATUSES = ("failed", "cancelled")


def rerun_point(routine: Routine, result: RunRoutineResult, run_id: str, from_step: str | None) -> str:
    """The step a re-run starts from: `from_step`, or the first step that failed or was cancelled.

    Raises:
        InvalidRequest: `from_step` names no step of the routine version the run ran (field `from`).
        Conflict: no `from_step`, and no step of the run failed or was cancelled.
    """
    ids = [step.id for step in routine.steps]
    if from_step is not None:
        if from_step not in ids:
            raise InvalidRequest(
                f"from: routine {routine.name!r} (the version run {run_id} ran) has no step "
                f"{from_step[:100]!r} (steps: {', '.join(ids)}).",
                field="from",
            )
        return from_step
    for step_id in ids:
        state = result.steps.get(step_id)
        if state is not None and state.status in POINT_STATUSES:
            return step_id
    raise Conflict(
        f"Run {run_id} has no step that failed or was cancelled, so there is nothing to re-run from: "
        "name the step to re-run from with 'from'.",
        field="from",
    )


def kept_steps(routine: Routine, result: RunRoutineResult, point: str) -> dict[str, StepResult]:
    """The steps of the old run that a re-run from `point` keeps (see the module docstring), in file order."""
    above = transitive_needs(routine.step_needs())
    kept: dict[str, StepResult] = {}
    for step in routine.steps:
        state = result.steps.get(step.id)
        if step.id == point or point in above[step.id] or state is None:
            continue
        if state.status not in KEPT_STATUSES or any(n not in kept for n in above[step.id]):
            continue
        kept[step.id] = StepResult(
            status=state.status,
            attempts=state.attempts,
            ref=state.ref,
            output=state.output if state.status == "succeeded" else None,
        )
    return kept
