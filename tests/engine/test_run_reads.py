"""What the api reads of a running run when its workers cannot answer: the real `RoutineWorkflow` on a
local Temporal dev server, its worker in this process with tests/engine/standin.py's `call_action`, and
the api's own `RunReads` asking Temporal as `GET /v1/runs/{id}` does."""

from __future__ import annotations

import uuid
from pathlib import Path

from standin import call_action, wait_sleeping
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from api.config import Settings
from api.db import make_engine
from api.runs.reads import RunReads
from api.runs.tables import RunRecord
from api.temporal import Temporal
from engine.foreach import ForeachWorkflow
from engine.run_inputs import resolve_inputs
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.validate import load_routine
from engine.workflow import RoutineWorkflow

SOURCE = """name: watched
steps:
  - id: quick
    uses: com.example.tools/echo/echo@1
    with: {text: hi}
  - id: slow
    uses: com.example.tools/echo/fail@1
    with: {mode: sleep, seconds: 5}
  - id: after
    uses: com.example.tools/echo/echo@1
    with: {text: done}
"""


async def test_a_running_run_keeps_its_last_progress_when_no_worker_answers(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    run_id = uuid.uuid4().hex[:12]
    routine = load_routine(SOURCE, "watched.yaml")
    queue = f"reads-{run_id}"
    address = temporal_env.client.service_client.config.target_host
    temporal = Temporal(Settings(temporal_address=address))
    reads = RunReads(make_engine(f"sqlite:///{tmp_path / 'api.db'}"), temporal)
    row = RunRecord(
        id=run_id,
        org_id="org_reads",
        key_id="key_reads",
        routine_name="watched",
        routine_version=1,
        routine_hash="sha256:reads",
        workflow_id=routine_workflow_id("watched", run_id),
        request_hash="sha256:none",
        inputs={},
        status="running",
    )
    async with Worker(
        temporal_env.client,
        task_queue=queue,
        workflows=[RoutineWorkflow, ForeachWorkflow],
        activities=[call_action],
    ):
        handle: WorkflowHandle[RoutineWorkflow, RunRoutineResult] = await temporal_env.client.start_workflow(
            RoutineWorkflow.run,
            RunRoutineInput(
                routine=routine,
                inputs=resolve_inputs(routine, {}),
                org_id=row.org_id,
                key_id=row.key_id,
                run_id=run_id,
            ),
            id=row.workflow_id,
            task_queue=queue,
        )
        await wait_sleeping("slow")
        await reads.refresh(row)
        seen = {sid: s["status"] for sid, s in row.result["steps"].items()} if row.result else {}
        assert seen == {"quick": "succeeded", "slow": "running", "after": "pending"}
    # the worker has stopped; a cancel asked of Temporal adds to the history, so the next read asks the
    # `progress` query again, and no worker answers it (it times out)
    await handle.cancel()
    await reads.refresh(row)
    assert row.status == "running"
    assert row.result is not None
    assert {sid: s["status"] for sid, s in row.result["steps"].items()} == seen  # not an empty map
    await handle.terminate("the test is over")
