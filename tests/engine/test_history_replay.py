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

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from record_histories import HISTORIES, RELEASES, cases_of
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from engine.converter import DATA_CONVERTER
from engine.step_calls import SUMMARY_BYTES, summary
from engine.worker import workflow_runner
from engine.workflow import RoutineWorkflow

RECORDED = sorted(HISTORIES.glob("*/*.json"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _workflow_id(path: Path, history: dict[str, Any]) -> str:
    """The id to replay a history under: a history's events do not hold its own id, but a foreach's child
    workflows' ids (engine.runs.foreach_workflow_id) are derived from it, and replay compares those."""
    for event in history["events"]:
        child = event.get("startChildWorkflowExecutionInitiatedEventAttributes")
        if child is not None:
            return str(child["workflowId"]).rsplit("/foreach/", 1)[0]
    return f"replay-{path.parent.name}-{path.stem}"


def test_every_release_has_its_cases_recorded() -> None:
    for release in RELEASES:
        recorded = {p.stem for p in (HISTORIES / release).glob("*.json")}
        assert recorded == {c.name for c in cases_of(release)}, release


RUNNERS = {"worker-sandbox": workflow_runner, "default-sandbox": SandboxedWorkflowRunner}


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize("path", RECORDED, ids=_id)
async def test_recorded_history_replays_on_the_current_workflow(path: Path, runner: str) -> None:
    history = json.loads(path.read_text(encoding="utf-8"))
    sandbox: WorkflowRunner = RUNNERS[runner]()
    replayer = Replayer(workflows=[RoutineWorkflow], data_converter=DATA_CONVERTER, workflow_runner=sandbox)
    result = await replayer.replay_workflow(WorkflowHistory.from_json(_workflow_id(path, history), history))
    assert result.replay_failure is None


async def test_a_history_recorded_with_other_activity_summaries_replays() -> None:
    # Activity summaries (what the Temporal UI shows for a step: engine.step_calls.summary) are the
    # commands' user metadata, which replay does not compare: a run recorded before a step's name:
    # titled its calls replays on the workflow that titles them.
    history = json.loads((HISTORIES / "v7" / "fan-in.json").read_text(encoding="utf-8"))
    changed = 0
    for event in history["events"]:
        if "activityTaskScheduledEventAttributes" in event:
            text = json.dumps(f"a title of long ago {changed}").encode()
            data = base64.b64encode(text).decode()
            event["userMetadata"] = {"summary": {"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": data}}
            changed += 1
    assert changed
    replayer = Replayer(workflows=[RoutineWorkflow], data_converter=DATA_CONVERTER)
    result = await replayer.replay_workflow(WorkflowHistory.from_json("replay-summaries", history))
    assert result.replay_failure is None


def test_a_steps_summary_names_it_and_stays_within_its_bound() -> None:
    ref = "com.example.tools/echo/echo@1.0.0"
    assert summary("greet", "Say hello", None, ref) == f"Say hello (greet) · {ref}"
    assert summary("each", None, 2, ref) == f"each[2] · {ref}"
    long = summary("greet", "é" * 1000, None, ref)  # cut to whole characters within SUMMARY_BYTES
    assert long.startswith("éé") and len(long.encode()) <= SUMMARY_BYTES
