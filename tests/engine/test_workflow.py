"""The routine workflow on a real Temporal dev server, its activity calling over real HTTP.

The HTTP server is the STAND-IN api of tests/activities/stand_in_api.py, which scripts answers the
real api gives only under load or failure (503 with Retry-After: 2, tool errors, a call held open);
the same workflow through the real POST /v1/actions/call and a node is test_workflow_e2e.py.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from activities.idempotency import step_idempotency_key
from engine.routine import Routine
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.worker import build_worker
from engine.workflow import RoutineWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "activities"))  # the stand-in's module
from stand_in_api import Answer, StandInApi, echo_answer, problem  # noqa: E402

TOKEN = "wkr_never-in-history"
ECHO = "com.example.tools/echo/echo@1"
UPPER = "com.example.tools/text/upper@1"
FLAKY = "com.example.tools/flaky/run@1"


@pytest.fixture
def stand_in() -> Iterator[StandInApi]:
    api = StandInApi().start()
    yield api
    api.stop()


@pytest.fixture
async def worker(temporal_env: WorkflowEnvironment, stand_in: StandInApi) -> AsyncIterator[Worker]:
    acts = ActionActivities(ActivitySettings(api_url=stand_in.url, worker_token=SecretStr(TOKEN)))
    w = build_worker(temporal_env.client, f"test-{uuid.uuid4()}", acts)
    async with w:
        yield w
    await acts.aclose()


async def start(client: Client, task_queue: str, routine: dict[str, Any], **inputs: Any) -> WorkflowHandle:
    model = Routine.model_validate(routine)
    run_id = uuid.uuid4().hex[:12]
    return await client.start_workflow(
        RoutineWorkflow.run,
        RunRoutineInput(routine=model, inputs=inputs, org_id="org_1", key_id="key_abc", run_id=run_id),
        id=routine_workflow_id(model.name, run_id),
        task_queue=task_queue,
        result_type=RunRoutineResult,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword("B3osRoutine"), model.name),
                SearchAttributePair(SearchAttributeKey.for_keyword("B3osOrg"), "org_1"),
            ]
        ),
    )


async def test_steps_chain_outputs_with_foreach_if_and_continue_on_error(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    stand_in.script(UPPER, [echo_answer({"text": "HELLO"})])
    stand_in.script(FLAKY, [problem(502, "tool_failed", "exit", "the command exited with 3", exit_code=3)])
    routine = {
        "name": "chain",
        "inputs": {"who": {"type": "string"}, "names": {"type": "array"}, "loud": {"type": "boolean"}},
        "steps": [
            {"id": "greet", "uses": ECHO, "with": {"text": "hello ${{ inputs.who }}"}},
            {"id": "shout", "uses": UPPER, "with": {"text": "${{ steps.greet.output.text }}"}},
            {
                "id": "each",
                "uses": ECHO,
                "foreach": "${{ inputs.names }}",
                "with": {"text": "${{ index }}:${{ item }}"},
            },
            {"id": "quiet", "uses": ECHO, "if": "${{ !inputs.loud }}", "with": {"text": "never"}},
            {"id": "flaky", "uses": FLAKY, "continue-on-error": True, "with": {"text": "x"}},
            {"id": "after", "uses": ECHO, "with": {"text": "${{ steps.flaky.status }}"}},
        ],
        "outputs": {
            "shout": "${{ steps.shout.output.text }}",
            "each": "${{ steps.each.output }}",
            "after": "${{ steps.after.output.text }}",
        },
    }
    handle = await start(
        temporal_env.client, worker.task_queue, routine, who="ann", names=["a", "b", "c"], loud=True
    )
    result = await handle.result()

    assert result.status == "succeeded"
    assert result.outputs == {
        "shout": "HELLO",
        "each": [{"text": "0:a"}, {"text": "1:b"}, {"text": "2:c"}],
        "after": "failed",
    }
    steps = result.steps
    assert steps["greet"].output == {"text": "hello ann"} and steps["greet"].attempts == 1
    assert steps["quiet"].status == "skipped"
    assert steps["flaky"].status == "failed"
    assert steps["flaky"].error is not None
    assert (steps["flaky"].error.code, steps["flaky"].error.reason) == ("tool_failed", "exit")
    assert steps["flaky"].error.message == "the command exited with 3"
    # every call on behalf of the starting key, with the worker's token, one key per step and item
    keys = [r.key for r in stand_in.requests]
    assert len(keys) == len(set(keys)) == 7
    assert {r.headers["x-b3os-on-behalf-of"] for r in stand_in.requests} == {"key_abc"}
    assert {r.headers["authorization"] for r in stand_in.requests} == {f"Bearer {TOKEN}"}
    assert step_idempotency_key(handle.id, "each", 1) in keys
    # the query answers the same shape; the UI names each activity by step and uses:
    assert await handle.query("progress", result_type=RunRoutineResult) == result
    summaries, history_text = [], ""
    async for event in handle.fetch_history_events():
        history_text += str(event)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summaries.append(event.user_metadata.summary.data.decode())
    assert '"greet · com.example.tools/echo/echo@1"' in summaries
    assert '"each[2] · com.example.tools/echo/echo@1"' in summaries
    assert TOKEN not in history_text
    # the history replays without nondeterminism (foreach in parallel included)
    replayer = Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


async def test_retry_after_is_waited_exactly_with_the_same_key(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    stand_in.script(ECHO, [problem(503, "tool_unavailable", "no_slot", "no VM is free", retry_after=2)])
    routine = {"name": "busy", "steps": [{"id": "echo", "uses": ECHO, "with": {"text": "hi"}}]}
    handle = await start(temporal_env.client, worker.task_queue, routine)
    result = await handle.result()

    assert result.status == "succeeded" and result.steps["echo"].attempts == 2
    first, second = stand_in.requests
    assert first.key == second.key == step_idempotency_key(handle.id, "echo", None)
    assert 2.0 <= second.at - first.at < 2.5
    # the history says the same: scheduled once, the attempt that succeeded started 2 s later
    times: dict[str, float] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            times["scheduled"] = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            times["started"] = event.event_time.ToDatetime().timestamp()
            assert event.activity_task_started_event_attributes.attempt == 2
            assert "no VM is free" in event.activity_task_started_event_attributes.last_failure.message
    assert 2.0 <= times["started"] - times["scheduled"] < 2.5


async def test_a_non_retryable_error_stops_the_run_with_its_reason(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    stand_in.script(ECHO, [problem(422, "invalid_input", "schema", "input.text: 5 is not of type 'string'")])
    routine = {
        "name": "bad",
        "steps": [
            {
                "id": "echo",
                "uses": ECHO,
                "with": {"text": 5},
                "retry": {"max-attempts": 5, "backoff": "100ms"},
            },
            {"id": "never", "uses": ECHO, "with": {"text": "no"}},
        ],
    }
    handle = await start(temporal_env.client, worker.task_queue, routine)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()

    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepFailed" and cause.non_retryable
    assert cause.message == "step echo failed: invalid_input (schema): input.text: 5 is not of type 'string'"
    assert cause.details[0] == {
        "step": "echo",
        "code": "invalid_input",
        "reason": "schema",
        "message": "input.text: 5 is not of type 'string'",
    }
    assert len(stand_in.requests) == 1  # not retried, and the next step never ran
    progress = await handle.query("progress", result_type=RunRoutineResult)
    assert progress.status == "failed"
    assert progress.steps["echo"].status == "failed" and progress.steps["echo"].attempts == 1
    assert progress.steps["never"].status == "pending"


async def test_a_retryable_tool_error_is_retried_with_the_step_backoff(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    busy = problem(502, "tool_failed", "tool_error", "try later", retryable=True, tool_code="busy")
    stand_in.script(ECHO, [busy, busy])
    routine = {
        "name": "flaky",
        "steps": [
            {
                "id": "echo",
                "uses": ECHO,
                "with": {"text": "hi"},
                "retry": {"max-attempts": 3, "backoff": "1s", "backoff-coefficient": 1.5},
            }
        ],
    }
    result = await (await start(temporal_env.client, worker.task_queue, routine)).result()

    assert result.status == "succeeded" and result.steps["echo"].attempts == 3
    at = [r.at for r in stand_in.requests]
    assert 1.0 <= at[1] - at[0] < 1.4 and 1.5 <= at[2] - at[1] < 1.9  # 1 s, then 1.5 s


async def test_retries_stop_at_max_attempts_with_the_last_error(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    stand_in.script(ECHO, [problem(429, "rate_limited", None, "120 starts a minute", retry_after=0)] * 2)
    routine = {
        "name": "limited",
        "steps": [{"id": "echo", "uses": ECHO, "with": {"text": "hi"}, "retry": {"max-attempts": 2}}],
    }
    handle = await start(temporal_env.client, worker.task_queue, routine)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    progress = await handle.query("progress", result_type=RunRoutineResult)
    assert progress.steps["echo"].attempts == 2
    assert progress.steps["echo"].error is not None and progress.steps["echo"].error.code == "rate_limited"


async def test_step_timeout_becomes_the_calls_timeout_ms(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    routine = {
        "name": "timed",
        "steps": [
            {"id": "a", "uses": ECHO, "timeout": "1500ms", "with": {"text": "x"}},
            {"id": "b", "uses": ECHO, "with": {"text": "y"}},
        ],
    }
    await (await start(temporal_env.client, worker.task_queue, routine)).result()
    assert stand_in.requests[0].body["timeout_ms"] == 1500
    assert "timeout_ms" not in stand_in.requests[1].body


async def test_a_cancelled_run_cancels_its_running_call(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    release = threading.Event()
    stand_in.script(ECHO, [Answer(hold=release)])
    routine = {"name": "cancel", "steps": [{"id": "slow", "uses": ECHO, "with": {"text": "x"}}]}
    handle = await start(temporal_env.client, worker.task_queue, routine)
    try:
        await _until(lambda: len(stand_in.requests) == 1)
        progress = await handle.query("progress", result_type=RunRoutineResult)
        assert progress.steps["slow"].status == "running"
        cancelled_at = time.time()
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        assert "cancel" in str(info.value.cause).lower()
        # the activity heartbeats, learns of the cancel and drops its HTTP call
        await _until(lambda: stand_in.requests[0].disconnected_at is not None)
        assert stand_in.requests[0].disconnected_at - cancelled_at < 2.5  # type: ignore[operator]
        progress = await handle.query("progress", result_type=RunRoutineResult)
        assert progress.status == "cancelled" and progress.steps["slow"].status == "cancelled"
    finally:
        release.set()


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.02)


async def test_an_expression_that_fails_at_run_time_fails_its_step_with_the_sentence(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    routine = {
        "name": "badexpr",
        "steps": [
            {"id": "a", "uses": ECHO, "with": {"text": "x"}},
            {"id": "b", "uses": ECHO, "with": {"text": "${{ steps.a.output.nope }}"}},
        ],
    }
    handle = await start(temporal_env.client, worker.task_queue, routine)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepFailed"
    assert cause.details[0]["code"] == "expression_failed" and cause.details[0]["reason"] == "with"
    assert "steps.a.output.nope" in cause.details[0]["message"]
    assert len(stand_in.requests) == 1  # step b never called


async def test_a_failed_foreach_item_fails_the_step_and_keeps_the_other_items(
    temporal_env: WorkflowEnvironment, worker: Worker, stand_in: StandInApi
) -> None:
    stand_in.script(
        UPPER,
        [echo_answer({"text": "A"}), problem(422, "invalid_input", None, "no b"), echo_answer({"text": "C"})],
    )
    routine = {
        "name": "items",
        "steps": [
            {
                "id": "each",
                "uses": UPPER,
                "foreach": ["a", "b", "c"],
                "with": {"text": "${{ item }}"},
                "continue-on-error": True,
            }
        ],
        "outputs": {"status": "${{ steps.each.status }}"},
    }
    result = await (await start(temporal_env.client, worker.task_queue, routine)).result()
    each = result.steps["each"]
    assert each.status == "failed" and result.outputs == {"status": "failed"}
    assert each.error is not None and (each.error.code, each.error.message) == ("invalid_input", "no b")
    assert sorted(o["text"] for o in each.output if o is not None) == ["A", "C"] and None in each.output
