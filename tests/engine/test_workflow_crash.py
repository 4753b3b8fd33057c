"""A routine worker process killed (SIGKILL) mid-run: the run finishes on a new worker process and no
step runs twice. Real parts only: worker processes, the api, a node running the echo tool, Temporal."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

from realstack import FREE_ECHO, FREE_FAIL, RoutineStack, no_traceback
from sqlmodel import Session, col, select
from workers import PATIENCE_S

from activities.idempotency import step_idempotency_key
from api.calls.tables import RUNNING, ActionCall, MeterEvent
from engine.routine import Routine
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.workflow import RoutineWorkflow


async def test_a_killed_worker_is_replaced_and_no_step_runs_twice(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    routine = Routine.model_validate(
        {
            "name": "crash",
            "steps": [
                {"id": "first", "uses": FREE_ECHO, "with": {"text": "one"}},
                {"id": "second", "uses": FREE_FAIL, "with": {"mode": "sleep", "seconds": 2}},
                {"id": "third", "uses": FREE_ECHO, "with": {"text": "${{ steps.first.output.text }}-three"}},
            ],
            "outputs": {"text": "${{ steps.third.output.text }}", "slept": "${{ steps.second.output }}"},
        }
    )
    queue = f"test-crash-{uuid.uuid4().hex[:8]}"
    first_worker = routine_stack.start_worker(queue=queue, name="crash-worker")
    run_id = uuid.uuid4().hex[:12]
    workflow_id = routine_workflow_id("crash", run_id)
    grant = routine_stack.grant(org, workflow_id=workflow_id)  # as the api mints one when it starts a run
    handle = await routine_stack.temporal_client.start_workflow(
        RoutineWorkflow.run,
        RunRoutineInput(
            routine=routine, inputs={}, org_id=org.org_id, key_id=org.key_id, run_id=run_id, grant=grant
        ),
        id=workflow_id,
        task_queue=queue,
        result_type=RunRoutineResult,
    )
    # kill the worker while the second step's call sleeps on the node
    deadline = time.monotonic() + PATIENCE_S
    while not any(c.action == "fail" and c.state == RUNNING for c in routine_stack.calls_of(org)):
        assert time.monotonic() < deadline, routine_stack.calls_of(org)
        await asyncio.sleep(0.02)
    first_worker.popen.send_signal(signal.SIGKILL)
    first_worker.popen.wait(timeout=10)
    second_worker = routine_stack.start_worker(queue=queue, name="crash-worker")
    try:
        result = await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        second_worker.stop()

    assert result.status == "succeeded"
    assert result.outputs == {"text": "one-three", "slept": {}}
    assert result.steps["second"].attempts == 2  # the dead worker's attempt timed out; the next one
    # ...sent the same key and got the answer of the call the first attempt started: one call per key
    keys = {step_idempotency_key(handle.id, s, None) for s in ("first", "second", "third")}
    stored = routine_stack.stored_keys(org)
    assert set(stored) == keys
    with Session(routine_stack.engine) as session:
        calls = session.exec(select(ActionCall).where(col(ActionCall.org_id) == org.org_id)).all()
        charged = session.exec(
            select(MeterEvent.call_id).where(
                col(MeterEvent.org_id) == org.org_id, col(MeterEvent.unit) == "actions.tool_call"
            )
        ).all()
    assert sorted(c.id for c in calls) == sorted(stored.values())  # exactly one call per key
    assert sorted(charged) == sorted(stored.values())  # and one charge each
    assert {(c.state, c.status) for c in calls} == {("done", 200)}
    no_traceback([second_worker])
