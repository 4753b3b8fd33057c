"""A run whose workflow task keeps failing is ended with a sentence (engine/stuck.py), on the real Temporal
dev server, with the workflow runner `b3os worker` uses and the stand-in `call_action`.

A workflow task is made to pass Temporal's 2 s deadlock timeout on purpose: the test replaces the `if:`
evaluation of one routine with a 60 s busy loop (the worker interrupts it). Everything else is real.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from standin import call_action
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import TerminatedError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workers import PATIENCE_S

import engine.expressions as expressions
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.stuck import STUCK_ATTEMPTS, GuardedRunner, StuckRuns
from engine.validate import load_routine, resolve_inputs
from engine.worker import workflow_runner
from engine.workflow import RoutineWorkflow

ECHO = "com.example.tools/echo/echo@1"
HANG = "inputs.hang"


def _routine(name: str, condition: str) -> str:
    return f"name: {name}\ninputs:\n  hang: {{type: boolean, default: true}}\nsteps:\n" + (
        f"  - id: only\n    uses: {ECHO}\n    if: ${{{{ {condition} }}}}\n    with: {{text: hi}}\n"
    )


async def _start(env: WorkflowEnvironment, queue: str, source: str) -> WorkflowHandle[Any, RunRoutineResult]:
    routine = load_routine(source, "r.yaml")
    run_id = uuid.uuid4().hex[:12]
    return await env.client.start_workflow(
        RoutineWorkflow.run,
        RunRoutineInput(
            routine=routine,
            inputs=resolve_inputs(routine, {}),
            org_id="org_standin",
            key_id="key_standin",
            run_id=run_id,
        ),
        id=routine_workflow_id(routine.name, run_id),
        task_queue=queue,
    )


@pytest.mark.timeout(300)
async def test_a_run_whose_workflow_task_deadlocks_is_ended_with_a_sentence_and_the_worker_goes_on(
    temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    condition = expressions.evaluate_condition

    def hanging(value: Any, *args: Any, **kwargs: Any) -> bool:
        if isinstance(value, str) and HANG in value:
            end = time.monotonic() + 60
            while time.monotonic() < end:  # Python code: the worker's interruption ends it
                pass
        return condition(value, *args, **kwargs)

    monkeypatch.setattr(expressions, "evaluate_condition", hanging)
    client, queue = temporal_env.client, f"stuck-{uuid.uuid4().hex[:8]}"
    stuck = StuckRuns(client, asyncio.get_running_loop())
    runner = GuardedRunner(workflow_runner(), stuck.report)  # as engine.worker.build_worker guards it
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[RoutineWorkflow],
        activities=[call_action],
        workflow_runner=runner,
        max_concurrent_workflow_tasks=2,
    )
    async with worker:
        began = time.monotonic()
        stuck_run = await _start(temporal_env, queue, _routine("stuck", HANG))
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(stuck_run.result(), PATIENCE_S)
        took = time.monotonic() - began
        assert isinstance(ended.value.cause, TerminatedError)
        reason = str(ended.value.cause)
        assert reason.startswith(
            f"the run stopped: its workflow task failed {STUCK_ATTEMPTS} times in a row ("
        )
        assert "so it was ended" in reason
        assert (await stuck_run.describe()).status == WorkflowExecutionStatus.TERMINATED
        # the worker's slots came back: two more runs on it succeed, one of them with an ordinary `if:`
        for source in (_routine("after", "true"), _routine("again", "1 < 2")):
            handle = await _start(temporal_env, queue, source)
            done = await asyncio.wait_for(handle.result(), PATIENCE_S)
            assert done.status == "succeeded" and done.steps["only"].output == {"text": "hi"}
        assert took < PATIENCE_S
    # and the worker shut down (leaving `async with` waits for it)
