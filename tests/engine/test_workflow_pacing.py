"""A run's expression work is spread over workflow tasks (engine/pacing.py), read from its history.

Runs use the real `RoutineWorkflow` on Temporal's time-skipping test server with the stand-in
`call_action` (tests/engine/standin.py). Which evaluations share a workflow task is read from the
history: a step's activity is scheduled by the workflow task that evaluated its `with:`, so the
ActivityTaskScheduled events between two WorkflowTaskCompleted events are the steps one task evaluated.
"""

from __future__ import annotations

import uuid

from record_histories import STEP_HEAVY_FOREACH
from standin import Run, run_routine
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from engine.pacing import (
    PATCH_EXACT_INTEGERS,
    PATCH_PACING,
    PATCH_SHORT_TASKS,
    PATCH_STEP_COST,
    WORK_PER_TASK,
)
from engine.workflow import RoutineWorkflow

ECHO = "com.example.tools/echo/echo@1"
BIG = "[" + ",".join(["1"] * 200) + "].size()"  # 408 characters: ~10-20 ms to compile
PAUSE_SUMMARY = "a pause: the run's expressions go on in a new workflow task"


def _routine(count: int, expression: str) -> str:
    steps = "".join(
        f"  - id: s{i}\n    uses: {ECHO}\n    needs: []\n    with: {{text: '{i}:${{{{ {expression} }}}}'}}\n"
        for i in range(count)
    )
    return f"name: pacing\nmax-parallel: {count}\nsteps:\n{steps}"


def _scheduled_per_task(run: Run) -> list[int]:
    """How many activities each workflow task scheduled, for the tasks that scheduled any."""
    counts, now = [], 0
    for event in run.history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            now += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and now:
            counts.append(now)
            now = 0
    return counts + ([now] if now else [])


def _marked(run: Run, patch: str) -> bool:
    """Whether the run recorded the marker of a `workflow.patched(patch)`."""
    kind = EventType.EVENT_TYPE_MARKER_RECORDED
    return any(
        patch.encode() in e.marker_recorded_event_attributes.SerializeToString() for e in run.events(kind)
    )


async def test_steps_whose_expressions_are_large_are_evaluated_a_few_per_workflow_task(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    run = await run_routine(time_skipping_env.client, _routine(8, BIG), run_id=uuid.uuid4().hex[:12])
    assert run.error is None and set(run.statuses.values()) == {"succeeded"}
    assert [run.progress.steps[f"s{i}"].output for i in range(8)] == [{"text": f"{i}:200"} for i in range(8)]
    # 8 fields of 408 characters (and ~30 units of evaluation): two fit in one task's WORK_PER_TASK, so 4
    # tasks and 3 pauses
    assert 2 * (len(BIG) + 50) < WORK_PER_TASK < 3 * len(BIG)
    assert _scheduled_per_task(run) == [2, 2, 2, 2]
    timers = run.events(EventType.EVENT_TYPE_TIMER_STARTED)
    assert len(timers) == 3
    assert all(t.user_metadata.summary.data == f'"{PAUSE_SUMMARY}"'.encode() for t in timers)
    assert _marked(run, PATCH_PACING) and _marked(run, PATCH_SHORT_TASKS)
    # the history replays as it ran: the pauses come from the routine's text, not from the clock or a cache
    await Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        run.history
    )


async def test_a_foreach_whose_items_cost_steps_to_evaluate_spreads_them_over_tasks(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    # each of 40 items' `with:` filters a list of 300 numbers: ~1,800 evaluation steps, ~300-400 units,
    # ~10-20 ms alone. Counted at a tenth of a unit a step (before PATCH_STEP_COST), 4 items (the
    # foreach's parallel cap) shared a task.
    items, xs = list(range(40)), list(range(300))
    run = await run_routine(
        time_skipping_env.client, STEP_HEAVY_FOREACH, {"items": items, "xs": xs}, run_id=uuid.uuid4().hex[:12]
    )
    assert run.error is None, run.error
    assert run.progress.steps["each"].output == [{"text": str(len(xs) - i)} for i in items]
    assert len(run.events(EventType.EVENT_TYPE_TIMER_STARTED)) >= 10
    assert max(_scheduled_per_task(run)) <= 3  # at most ~1,000 units a task
    assert _marked(run, PATCH_STEP_COST)
    await Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        run.history
    )


async def test_a_routine_of_small_expressions_never_pauses(time_skipping_env: WorkflowEnvironment) -> None:
    run = await run_routine(time_skipping_env.client, _routine(8, "1 + 2"), run_id=uuid.uuid4().hex[:12])
    assert run.error is None and _scheduled_per_task(run) == [8]
    assert run.events(EventType.EVENT_TYPE_TIMER_STARTED) == []
    assert not any(_marked(run, p) for p in (PATCH_PACING, PATCH_SHORT_TASKS, PATCH_STEP_COST))


async def test_a_result_integer_beyond_what_json_carries_fails_its_step_with_a_sentence(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = f"""\
name: big-integers
steps:
  - id: exact
    uses: {ECHO}
    with: {{text: "${{{{ string(9007199254740991 + 1) }}}}"}}
  - id: beyond
    uses: {ECHO}
    needs: [exact]
    with: {{text: "${{{{ 9007199254740991 + 1 }}}}"}}
"""
    run = await run_routine(time_skipping_env.client, source, run_id=uuid.uuid4().hex[:12])
    assert run.statuses == {"exact": "succeeded", "beyond": "failed"}
    assert run.progress.steps["exact"].output == {"text": "9007199254740992"}
    error = run.progress.steps["beyond"].error
    assert error is not None and error.code == "expression_failed"
    assert "the result 9007199254740992 is beyond the integers JSON carries exactly" in error.message
    assert _marked(run, PATCH_EXACT_INTEGERS)  # a run started before the rule replays as it ran
    await Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        run.history
    )
