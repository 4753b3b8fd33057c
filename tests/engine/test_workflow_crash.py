"""A routine worker process killed mid-run: the run finishes on a new worker and no step runs twice.

The workers are real `python -m engine.worker` processes. The HTTP server is the STAND-IN api of
tests/activities/stand_in_api.py: it holds a call open while the worker is killed, which the echo
tool on a real node is too fast to allow.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from activities.idempotency import step_idempotency_key
from engine.routine import Routine
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.workflow import RoutineWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "activities"))  # the stand-in's module
from stand_in_api import Answer, StandInApi  # noqa: E402

ECHO = "com.example.tools/echo/echo@1"
SLOW = "com.example.tools/slow/run@1"


@pytest.fixture
def stand_in() -> Iterator[StandInApi]:
    api = StandInApi().start()
    yield api
    api.stop()


def _start_worker(
    env: WorkflowEnvironment, api: StandInApi, queue: str, log: Path
) -> subprocess.Popen[bytes]:
    environ = {
        **os.environ,
        "B3OS_TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "B3OS_TEMPORAL_NAMESPACE": env.client.namespace,
        "B3OS_TEMPORAL_TASK_QUEUE": queue,
        "B3OS_API_URL": api.url,
        "B3OS_WORKER_TOKEN": "wkr_crash-test",
    }
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "engine.worker"], env=environ, stdout=out, stderr=out)


async def _until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.05)


async def test_a_killed_worker_is_replaced_and_no_step_runs_twice(
    temporal_env: WorkflowEnvironment, stand_in: StandInApi, tmp_path: Path
) -> None:
    release = threading.Event()
    stand_in.script(SLOW, [Answer(hold=release)])
    routine = Routine.model_validate(
        {
            "name": "crash",
            "steps": [
                {"id": "first", "uses": ECHO, "with": {"text": "one"}},
                {"id": "second", "uses": SLOW, "with": {"text": "${{ steps.first.output.text }}-two"}},
                {"id": "third", "uses": ECHO, "with": {"text": "${{ steps.second.output.text }}-three"}},
            ],
            "outputs": {"text": "${{ steps.third.output.text }}"},
        }
    )
    queue = f"test-{uuid.uuid4()}"
    log = tmp_path / "worker.log"
    workers = [_start_worker(temporal_env, stand_in, queue, log)]
    try:
        run_id = uuid.uuid4().hex[:12]
        handle = await temporal_env.client.start_workflow(
            RoutineWorkflow.run,
            RunRoutineInput(routine=routine, inputs={}, org_id="org_1", key_id="key_1", run_id=run_id),
            id=routine_workflow_id("crash", run_id),
            task_queue=queue,
            result_type=RunRoutineResult,
        )
        await _until(lambda: len(stand_in.requests) == 2)  # first done, second waiting on the api
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(timeout=10)
        release.set()  # the call the dead worker started finishes on the api side and is kept
        workers.append(_start_worker(temporal_env, stand_in, queue, log))

        result = await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        release.set()
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=15)

    assert result.status == "succeeded"
    assert result.outputs == {"text": "one-two-three"}
    keys = {step: step_idempotency_key(handle.id, step, None) for step in ("first", "second", "third")}
    assert len(stand_in.for_key(keys["first"])) == 1  # replayed from history, never sent again
    assert len(stand_in.for_key(keys["second"])) == 2  # the retry carried the same key...
    assert stand_in.executions == {keys["first"]: 1, keys["second"]: 1, keys["third"]: 1}  # ...and ran once
    assert result.steps["second"].attempts == 2
    assert b"Traceback" not in log.read_bytes()
