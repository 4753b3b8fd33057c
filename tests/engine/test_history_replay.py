"""Runs in flight survive a worker upgrade: every recorded history replays on the current workflow.

tests/engine/histories/<release>/*.json are histories of runs recorded with the workflow code of each
release (tests/engine/record_histories.py). Each is replayed with temporalio's `Replayer`, with the
worker's own workflow and data converter, in the worker's sandbox (engine.worker.workflow_runner) and
in the default one: a change of the workflow that would make a run started by an older worker fail
with nondeterminism fails here, and so does a clock, randomness or I/O call of engine/workflow.py on
a recorded path (the default sandbox refuses it; the worker's passes that module through).
Behaviour changes go behind `workflow.patched(...)` (docs/internals.md, "Upgrading workers").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from record_histories import HISTORIES, RELEASES, cases_of
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from engine.worker import workflow_runner
from engine.workflow import RoutineWorkflow

RECORDED = sorted(HISTORIES.glob("*/*.json"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_every_release_has_its_cases_recorded() -> None:
    for release in RELEASES:
        recorded = {p.stem for p in (HISTORIES / release).glob("*.json")}
        assert recorded == {c.name for c in cases_of(release)}, release


RUNNERS = {"worker-sandbox": workflow_runner, "default-sandbox": SandboxedWorkflowRunner}


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("path", RECORDED, ids=_id)
async def test_recorded_history_replays_on_the_current_workflow(path: Path, runner: str) -> None:
    text = path.read_text(encoding="utf-8")
    workflow_id = f"replay-{path.parent.name}-{path.stem}"  # a history's events do not hold its id
    sandbox: WorkflowRunner = RUNNERS[runner]()
    replayer = Replayer(
        workflows=[RoutineWorkflow], data_converter=pydantic_data_converter, workflow_runner=sandbox
    )
    result = await replayer.replay_workflow(WorkflowHistory.from_json(workflow_id, text))
    assert result.replay_failure is None
