"""A foreach of more items than one history carries runs them in child workflows (engine.foreach).

The real `RoutineWorkflow` and `ForeachWorkflow` on Temporal's time-skipping test server, with the
stand-in `call_action` of tests/engine/standin.py, and chunks of 4 items (the real size, 1,000, is
measured by `python -m bench growth`): what ran where is read from the run's and its children's
histories, as the Temporal UI shows them.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from standin import Run, run_routine
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

import engine.foreach
import engine.runs
import engine.workflow
from engine.runs import ForeachChunkInput, RunRoutineResult, routine_workflow_id

ECHO = "com.example.tools/echo/echo@1"
FAIL = "com.example.tools/echo/fail@1"
CHUNK = 4


@pytest.fixture(autouse=True)
def chunks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (engine.runs, engine.workflow, engine.foreach):
        monkeypatch.setattr(module, "FOREACH_CHUNK_ITEMS", CHUNK)


def _routine(each: str, *, inputs: str = "  names: {type: array}\n", outputs: str = "") -> str:
    return (
        f"name: chunks\ninputs:\n{inputs}steps:\n"
        f"  - id: unread\n    uses: {ECHO}\n    with: {{text: not read by each}}\n"
        f"  - id: first\n    uses: {ECHO}\n    with: {{text: hello}}\n"
        f"{each}{outputs}"
    )


async def _run(
    env: WorkflowEnvironment, source: str, inputs: dict[str, object], cancel_when_sleeping: str | None = None
) -> Run:
    run_id = uuid.uuid4().hex[:12]
    return await run_routine(
        env.client, source, inputs, run_id=run_id, cancel_when_sleeping=cancel_when_sleeping
    )


def _children(run: Run) -> list[str]:
    """The workflow ids of the child workflows the run started, in order."""
    kind = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    return [e.start_child_workflow_execution_initiated_event_attributes.workflow_id for e in run.events(kind)]


async def _child_activities(env: WorkflowEnvironment, workflow_id: str) -> list[str]:
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    kind = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    return [
        e.activity_task_scheduled_event_attributes.activity_id for e in history.events if e.event_type == kind
    ]


async def _child_input(env: WorkflowEnvironment, workflow_id: str) -> ForeachChunkInput:
    history = await env.client.get_workflow_handle(workflow_id).fetch_history()
    payloads = list(history.events[0].workflow_execution_started_event_attributes.input.payloads)
    (found,) = env.client.data_converter.payload_converter.from_payloads(payloads, [ForeachChunkInput])
    assert isinstance(found, ForeachChunkInput)
    return found


async def test_more_items_than_a_chunk_run_in_child_workflows_and_keep_item_order(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    each = (
        f"  - id: each\n    uses: {ECHO}\n    foreach: ${{{{ inputs.names }}}}\n"
        "    with: {text: '${{ steps.first.output.text }} ${{ item }} ${{ index }}'}\n"
    )
    names = [f"n{i}" for i in range(10)]
    run = await _run(
        time_skipping_env,
        _routine(each, outputs="outputs:\n  all: ${{ steps.each.output }}\n"),
        {"names": names},
    )
    assert run.error is None and run.progress.status == "succeeded"
    expected = [{"text": f"hello n{i} {i}"} for i in range(10)]
    assert run.progress.outputs["all"] == expected
    assert run.progress.steps["each"].status == "succeeded"
    # the run's own history holds the other steps' calls and one child workflow per chunk of 4
    assert sorted(run.scheduled().values()) == ["first", "unread"]
    workflow_id = run.history.events[0].workflow_execution_started_event_attributes
    children = _children(run)
    root = children[0].rsplit("/foreach/", 1)[0]
    assert root.startswith("routine-chunks-")
    assert children == [f"{root}/foreach/each/{k}" for k in range(3)]
    assert workflow_id is not None
    # each child calls its items under their own indices, and is given of the run's steps only the one
    # its with: reads
    assert await _child_activities(time_skipping_env, children[0]) == [f"each-{i}" for i in range(4)]
    assert await _child_activities(time_skipping_env, children[2]) == ["each-8", "each-9"]
    last = await _child_input(time_skipping_env, children[2])
    assert (last.first, last.items, last.run_workflow_id) == (8, ["n8", "n9"], root)
    assert sorted(last.names["steps"]) == ["first"]


async def test_a_failed_item_fails_the_step_and_the_other_chunks_still_run(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    each = (
        f"  - id: each\n    uses: {ECHO}\n    continue-on-error: true\n"
        "    foreach: ${{ inputs.names }}\n    with:\n      text: ${{ item }}\n"
    )
    source = _routine(each, outputs="outputs:\n  all: ${{ steps.each.output }}\n")
    # item 1 is no string: the echo's input check refuses it (400, not retried)
    run = await _run(
        time_skipping_env,
        source,
        {"names": ["a", 5, "c", "d", "e", "f"]},
    )
    assert run.error is None and run.progress.status == "succeeded"
    step = run.progress.steps["each"]
    assert step.status == "failed" and step.error is not None
    assert (step.error.code, step.error.message) == ("invalid_request", "input: 5 is not of type 'string'")
    assert run.progress.outputs["all"] == [
        {"text": "a"},
        None,
        {"text": "c"},
        {"text": "d"},
        {"text": "e"},
        {"text": "f"},
    ]
    assert len(_children(run)) == 2


async def test_a_cancelled_run_cancels_the_chunk_under_way(time_skipping_env: WorkflowEnvironment) -> None:
    each = (
        f"  - id: each\n    uses: {FAIL}\n    foreach: ${{{{ inputs.names }}}}\n"
        "    with: {mode: sleep, seconds: 20}\n"
    )
    run = await _run(
        time_skipping_env, _routine(each), {"names": list(range(6))}, cancel_when_sleeping="each-4"
    )
    assert run.progress.status == "cancelled"
    assert run.progress.steps["each"].status == "cancelled"
    children = _children(run)
    assert len(children) == 2
    second = await time_skipping_env.client.get_workflow_handle(children[1]).describe()
    assert second.status == WorkflowExecutionStatus.CANCELED


async def test_a_chunk_whose_outputs_pass_a_payload_fails_the_step_and_starts_no_more(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    big = base64.b64encode(b"x" * 450_000).decode()  # four echoes of it pass the 2 MiB of one payload
    each = (
        f"  - id: each\n    uses: {ECHO}\n    foreach: ${{{{ inputs.names }}}}\n"
        "    with: {text: '${{ item }}', file: {$bytes: '${{ inputs.big }}', name: f.bin}}\n"
    )
    inputs = "  names: {type: array}\n  big: {type: string}\n"
    run = await _run(time_skipping_env, _routine(each, inputs=inputs), {"names": list("abcde"), "big": big})
    assert run.progress.status == "failed"
    error = run.progress.steps["each"].error
    assert error is not None and (error.code, error.reason) == ("payload_too_large", "foreach")
    assert error.message.startswith("what items 0..3 output is 2.29 MiB encoded, more than the 1.94 MiB"), (
        error.message
    )
    assert error.message.endswith("return less of each item (files through a later step, say)"), error.message
    assert len(_children(run)) == 1  # the second chunk never started
    assert isinstance(run.progress, RunRoutineResult)


def test_a_run_and_its_chunks_name_their_workflows_as_the_api_checks_them() -> None:
    run = routine_workflow_id("r", "run_1")
    chunk = engine.runs.foreach_workflow_id(run, "each", 3)
    assert chunk == "routine-r-run_1/foreach/each/3"
    assert engine.runs.is_foreach_workflow_id(chunk, run, "each")
    assert not engine.runs.is_foreach_workflow_id(chunk, run, "other")
    assert not engine.runs.is_foreach_workflow_id(chunk, "routine-r-run_2", "each")
    assert not engine.runs.is_foreach_workflow_id(f"{run}/foreach/each/x", run, "each")
