"""No run stays stuck on a workflow task and no worker keeps a slot it lost (engine/stuck.py), with real
worker processes on the real Temporal dev server, the api and a node.

The workers are `engine.worker.run` with an `if:` that stalls on purpose (tests/engine/stalling_worker.py):
60 s of Python, which the SDK's deadlock detection interrupts, or an hour's sleep in C, which nothing in
the process can interrupt. Everything else is real.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from calls.stack import Proc
from realstack import FREE_ECHO, RoutineStack
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import TerminatedError
from workers import PATIENCE_S

from engine.routine import Routine
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.stuck import STUCK_ATTEMPTS
from engine.worker import EXIT_LOST_SLOT
from engine.workflow import RoutineWorkflow

STALLING = (str(Path(__file__).with_name("stalling_worker.py")),)


async def _start(stack: RoutineStack, queue: str, condition: str) -> WorkflowHandle[Any, RunRoutineResult]:
    org = stack.runner()
    name = f"stuck-{uuid.uuid4().hex[:6]}"
    routine = Routine.model_validate(
        {
            "name": name,
            "inputs": {"spin": {"type": "boolean"}, "block": {"type": "boolean"}},
            "steps": [
                {"id": "only", "uses": FREE_ECHO, "if": f"${{{{ {condition} }}}}", "with": {"text": "hi"}}
            ],
        }
    )
    run_id = uuid.uuid4().hex[:12]
    workflow_id = routine_workflow_id(name, run_id)
    return await stack.temporal_client.start_workflow(
        RoutineWorkflow.run,
        RunRoutineInput(
            routine=routine,
            inputs={"spin": True, "block": True},
            org_id=org.org_id,
            key_id=org.key_id,
            run_id=run_id,
            grant=stack.grant(org, workflow_id=workflow_id),
        ),
        id=workflow_id,
        task_queue=queue,
        result_type=RunRoutineResult,
    )


async def _ended_with(handle: WorkflowHandle[Any, RunRoutineResult]) -> str:
    """The reason the run was terminated with (it must have been)."""
    with pytest.raises(WorkflowFailureError) as ended:
        await asyncio.wait_for(handle.result(), PATIENCE_S)
    assert isinstance(ended.value.cause, TerminatedError), ended.value.cause
    return str(ended.value.cause)


async def _succeeds(stack: RoutineStack, queue: str) -> None:
    handle = await _start(stack, queue, "1 < 2")
    done = await asyncio.wait_for(handle.result(), PATIENCE_S)
    assert done.status == "succeeded" and done.steps["only"].output == {"text": "hi"}


def _exits_with(proc: Proc, code: int) -> None:
    try:
        exited = proc.popen.wait(timeout=PATIENCE_S)
    except subprocess.TimeoutExpired:
        exited = None
    assert exited == code, f"the worker exited with {exited}, not {code}:\n{proc.log.read_text()[-5000:]}"


async def _logged(proc: Proc, text: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while text.encode() not in proc.log.read_bytes():
        assert time.monotonic() < deadline, proc.log.read_text()[-3000:]
        await asyncio.sleep(0.1)


@pytest.mark.timeout(300)
async def test_runs_whose_workflow_task_deadlocks_end_with_a_sentence_and_the_worker_keeps_its_slots(
    routine_stack: RoutineStack,
) -> None:
    queue = f"test-stuck-{uuid.uuid4().hex[:8]}"
    worker = routine_stack.start_worker(
        queue=queue, name="stuck-worker", program=STALLING, B3OS_TEMPORAL_WORKFLOW_TASKS="2"
    )
    try:
        # as many spinning runs as the worker has workflow task slots
        stuck = [await _start(routine_stack, queue, "inputs.spin") for _ in range(2)]
        for handle in stuck:
            reason = await _ended_with(handle)
            assert reason.startswith(
                f"the run stopped: its workflow task failed {STUCK_ATTEMPTS} times in a row ("
            )
            assert reason.endswith("so it was ended; its steps' calls that ran are charged as usual")
        # the slots came back: a run on the same worker process succeeds
        await _succeeds(routine_stack, queue)
        assert worker.popen.poll() is None
    finally:
        worker.popen.send_signal(signal.SIGTERM)
    _exits_with(worker, 0)  # and it stops on SIGTERM, its tasks ended
    assert b"ended the run" in worker.log.read_bytes()


@pytest.mark.timeout(300)
async def test_a_workflow_task_stuck_in_c_ends_its_run_and_the_worker_restarts_to_free_its_slot(
    routine_stack: RoutineStack,
) -> None:
    queue = f"test-hung-{uuid.uuid4().hex[:8]}"
    # each waits 2 s for its tasks once stopping, not the 10 s of engine.worker.SHUTDOWN_S
    first = routine_stack.start_worker(
        queue=queue, name="hung-worker", program=STALLING, B3OS_TEMPORAL_SHUTDOWN_S="2"
    )
    handle = await _start(routine_stack, queue, "inputs.block")
    await _logged(first, "Potential deadlock detected")
    # SIGTERM stops a worker whose slot is stuck: it exits once its shutdown's time is up
    first.popen.send_signal(signal.SIGTERM)
    _exits_with(first, 1)
    assert b"did not stop within 2 s" in first.log.read_bytes()
    # the next worker meets the same task: once it has run B3OS_TEMPORAL_HUNG_TASK_S, the run is ended
    # and the worker exits for its supervisor to start it again
    second = routine_stack.start_worker(
        queue=queue,
        name="hung-worker",
        program=STALLING,
        B3OS_TEMPORAL_HUNG_TASK_S="3",
        B3OS_TEMPORAL_SHUTDOWN_S="2",
    )
    reason = await _ended_with(handle)
    assert reason.startswith("the run stopped: a workflow task of it still ran "), reason
    _exits_with(second, EXIT_LOST_SLOT)
    assert b"stopping, to be started again" in second.log.read_bytes()
    # started again, the worker runs the queue's runs
    third = routine_stack.start_worker(queue=queue, name="hung-worker")
    try:
        await _succeeds(routine_stack, queue)
    finally:
        third.popen.send_signal(signal.SIGTERM)
    _exits_with(third, 0)
