"""A foreach's child workflows call as their run on the session's real stack (tests/realstack.py), and
nothing else does: the api asks Temporal whose child a calling workflow is (api.runs.links).

The runs here are worked by a routine worker in this process whose foreach chunks hold 2 items (the
real 1,000 would need a thousand calls a test), polling a task queue of its own that a second api process
starts runs on; everything else is the stack's: Temporal, the api's database, the node, the echo tool.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from calls.stack import WORKER_TOKEN, Org
from pydantic import SecretStr
from realstack import FAIL_REF, FREE_ECHO, RoutineStack
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

import engine.foreach
import engine.runs
import engine.workflow
from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from activities.idempotency import step_idempotency_key
from engine.routine import Routine, Step
from engine.runs import (
    FOREACH_WORKFLOW_TYPE,
    WORKFLOW_TYPE,
    ForeachChunkInput,
    ForeachChunkResult,
    RunRoutineInput,
)
from engine.worker import build_worker

CHUNK = 2


@pytest.fixture(autouse=True)
def chunks_of_2(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (engine.runs, engine.workflow, engine.foreach):
        monkeypatch.setattr(module, "FOREACH_CHUNK_ITEMS", CHUNK)


@asynccontextmanager
async def _chunking(stack: RoutineStack) -> AsyncIterator[tuple[str, str]]:
    """An api process starting runs on a queue of its own, and a worker in this process polling it:
    (the api's url, the queue)."""
    queue = f"chunks-{uuid.uuid4().hex[:8]}"
    url, api = stack.start_api(
        extra_env={"B3OS_TEMPORAL_TASK_QUEUE": queue, "B3OS_TEMPORAL_BUSY_TASK_QUEUE": queue}, listed=False
    )
    activities = ActionActivities(ActivitySettings(api_url=url, worker_token=SecretStr(WORKER_TOKEN)))
    try:
        async with build_worker(stack.temporal_client, queue, activities):
            yield url, queue
    finally:
        await activities.aclose()
        api.stop()


async def test_a_foreachs_chunks_call_as_their_run_once_each_under_the_runs_keys(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = (
        f"name: chunked\nsteps:\n  - id: each\n    uses: {FREE_ECHO}\n    foreach: [a, b, c, d, e]\n"
        "    with:\n      text: ${{ item }}\n"
    )
    async with _chunking(routine_stack) as (url, _):
        stored = await routine_stack.store(org, source, url=url)
        assert stored.status_code == 201, stored.text
        run_id = await routine_stack.start_run(org, "chunked", url=url)
        run = await routine_stack.final(org, run_id, url=url)
    assert run["status"] == "succeeded", run
    assert run["steps"]["each"]["output"] == [{"text": x} for x in "abcde"]
    workflow_id = run["workflow_id"]
    # five calls, each once, under the keys the run itself derives, made by three child workflows
    calls = routine_stack.calls_of(org)
    assert len(calls) == 5 and {c.surface for c in calls} == {"routine"}
    assert set(routine_stack.stored_keys(org)) == {
        step_idempotency_key(workflow_id, "each", i) for i in range(5)
    }
    history = await routine_stack.history(workflow_id)
    children = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert children == [f"{workflow_id}/foreach/each/{k}" for k in range(3)]


@dataclass
class Victim:
    """A running run of the victim's, and its grant as anyone who reads its history sees it."""

    org: Org
    run_id: str
    workflow_id: str
    grant: str


async def _victim(stack: RoutineStack, url: str) -> Victim:
    """A run of a fresh organization whose one foreach item sleeps 3 s."""
    org = stack.runner()
    source = (
        f"name: slow\nsteps:\n  - id: wait\n    uses: {FAIL_REF}\n    foreach: [1]\n"
        "    with: {mode: sleep, seconds: 30}\n"
    )
    stored = await stack.store(org, source, url=url)
    assert stored.status_code == 201, stored.text
    run_id = await stack.start_run(org, "slow", url=url)
    workflow_id = (await stack.read(org, run_id, url=url))["workflow_id"]
    (first, *_) = await stack.history(workflow_id)
    payloads = list(first.workflow_execution_started_event_attributes.input.payloads)
    converter = stack.temporal_client.data_converter.payload_converter
    (run_input,) = converter.from_payloads(payloads, [RunRoutineInput])
    assert isinstance(run_input, RunRoutineInput) and run_input.grant is not None
    return Victim(org, run_id, workflow_id, run_input.grant)


async def test_a_workflow_started_by_hand_under_a_chunks_id_calls_nothing(
    routine_stack: RoutineStack,
) -> None:
    async with _chunking(routine_stack) as (url, queue):
        victim = await _victim(routine_stack, url)
        # a chunk of the victim's foreach step, started straight on Temporal: no parent
        handle = await routine_stack.temporal_client.start_workflow(
            FOREACH_WORKFLOW_TYPE,
            ForeachChunkInput(
                step=Step.model_validate(
                    {"id": "wait", "uses": FAIL_REF, "with": {"mode": "sleep", "seconds": 1}}
                ),
                items=[1, 2],
                first=0,
                key_id=victim.org.key_id,
                grant=victim.grant,
                run_workflow_id=victim.workflow_id,
            ),
            id=f"{victim.workflow_id}/foreach/wait/0",
            task_queue=queue,
            result_type=ForeachChunkResult,
        )
        result = await handle.result()
    errors = [item.error for item in result.items]
    assert all(e is not None and (e.code, e.reason) == ("forbidden", "execution_not_of_run") for e in errors)
    assert errors[0] is not None and "name no child workflow Temporal knows" in errors[0].message
    assert len(routine_stack.calls_of(victim.org)) == 1  # the run's own sleep, and nothing else


async def test_the_chunks_of_a_workflow_started_again_under_the_runs_id_call_nothing(
    routine_stack: RoutineStack,
) -> None:
    async with _chunking(routine_stack) as (url, queue):
        victim = await _victim(routine_stack, url)
        await routine_stack.temporal_client.get_workflow_handle(victim.workflow_id).terminate("stolen")
        forged = Routine.model_validate(
            {
                "name": "slow",
                "steps": [
                    {"id": "wait", "uses": FREE_ECHO, "foreach": ["x", "y", "z"], "with": {"text": "mine"}}
                ],
            }
        )
        handle = await routine_stack.temporal_client.start_workflow(
            WORKFLOW_TYPE,
            RunRoutineInput(
                routine=forged,
                org_id=victim.org.org_id,
                key_id=victim.org.key_id,
                run_id=victim.run_id,
                grant=victim.grant,
            ),
            id=victim.workflow_id,
            task_queue=queue,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.message.startswith(
        "step wait failed: forbidden (execution_not_of_run): This call does not come from the workflow "
        f"execution the api started for run {victim.run_id}"
    ), cause.message
    (call,) = routine_stack.calls_of(victim.org)  # the run's own step, and nothing else
    assert call.action == "fail"
