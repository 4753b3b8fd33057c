"""Every example routine validates, fits the JSON Schema, and runs on the real routine workflow.

The runs use `engine.workflow.RoutineWorkflow` itself on Temporal's time-skipping test server (retry
backoffs take no wall time), with the stand-in `call_action` activity of tests/engine/standin.py at the
one seam that cannot run here without the stack (it answers like the echo tool and the Open-Meteo place
search, and fails through the real activity's error mapping).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from standin import PACKS, REPO, call_action
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from engine.run_inputs import resolve_inputs
from engine.runs import RunRoutineInput, RunRoutineResult, routine_workflow_id
from engine.validate import load_routine_file
from engine.workflow import RoutineWorkflow
from engine.yaml_positions import compose

EXAMPLES = sorted(
    p for p in (REPO / "examples" / "routines").glob("*.yaml") if not p.name.endswith(".test.yaml")
)
MODELINE = "# yaml-language-server: $schema=../../docs/routine.schema.json"

RunExample = Callable[[Path, dict[str, Any]], Awaitable[tuple[dict[str, Any], dict[str, Any]]]]


def test_there_are_examples_and_hello_is_one_of_them() -> None:
    assert "hello.yaml" in [p.name for p in EXAMPLES]
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_the_example_packs(path: Path) -> None:
    routine = load_routine_file(path, PACKS)
    assert routine.steps
    assert path.read_text().splitlines()[0] == MODELINE


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_fits_the_committed_json_schema(path: Path) -> None:
    schema = json.loads((REPO / "docs" / "routine.schema.json").read_text())
    # read as b3os and editors read it (YAML 1.2: `on:` is a key, where YAML 1.1 would read True)
    jsonschema.Draft202012Validator(schema).validate(compose(path.read_text()).value)


@pytest.fixture
async def run_example(time_skipping_env: WorkflowEnvironment) -> RunExample:
    """Run an example routine on the real workflow: `await run_example(path, inputs)` -> (steps, outputs)."""

    async def run(path: Path, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        routine = load_routine_file(path)
        run_id = uuid.uuid4().hex[:12]
        queue = f"examples-{run_id}"
        client = time_skipping_env.client
        async with Worker(client, task_queue=queue, workflows=[RoutineWorkflow], activities=[call_action]):
            result = await client.execute_workflow(
                RoutineWorkflow.run,
                RunRoutineInput(
                    routine=routine,
                    inputs=resolve_inputs(routine, given),
                    org_id="org_examples",
                    key_id="key_examples",
                    run_id=run_id,
                ),
                id=routine_workflow_id(routine.name, run_id),
                task_queue=queue,
                result_type=RunRoutineResult,
            )
        assert result.status == "succeeded", result
        run = result.model_dump(mode="json")
        return run["steps"], run["outputs"]

    return run


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
async def test_example_runs_with_its_default_inputs(path: Path, run_example: RunExample) -> None:
    routine = load_routine_file(path)
    given = {name: ["ann", "bo"] for name, spec in routine.inputs.items() if spec.required}
    steps, outputs = await run_example(path, given)
    assert set(steps) == {s.id for s in routine.steps}
    assert outputs.keys() == routine.outputs.keys()


async def test_hello_chains_text_and_file_and_greets_each_friend(run_example: RunExample) -> None:
    path = REPO / "examples" / "routines" / "hello.yaml"
    steps, outputs = await run_example(path, {"name": "Ann", "friends": ["ada", "bob"]})
    assert steps["greet"]["output"]["text"] == "hello Ann"
    assert outputs["greeting"] == "hello Ann, again (2 friends next)"
    assert outputs["file"] == {
        "$bytes": "aGVsbG8K",
        "name": "hello.txt",
        "bytes": 6,
        "contentType": "text/plain",
    }
    assert outputs["friends"] == ["1. hello ada", "2. hello bob"]
    assert steps["friends"]["output"] == [{"text": "1. hello ada"}, {"text": "2. hello bob"}]


async def test_conditional_skips_the_long_report_unless_asked(run_example: RunExample) -> None:
    path = REPO / "examples" / "routines" / "conditional.yaml"
    steps, outputs = await run_example(path, {})
    assert steps["long"]["status"] == "skipped"
    assert outputs == {
        "report": "short report on the weekly numbers",
        "long_ran": False,
        "notice": "only the short report",
    }
    steps, outputs = await run_example(path, {"detailed": True})
    assert steps["long"]["status"] == "succeeded"
    assert outputs["long_ran"] is True and outputs["notice"] == "both reports"


async def test_places_says_where_the_best_match_is_or_that_there_is_none(run_example: RunExample) -> None:
    path = REPO / "examples" / "routines" / "places.yaml"
    _, outputs = await run_example(path, {})
    assert outputs == {"found": 1, "said": "Berlin is at 52.52, 13.41"}
    steps, outputs = await run_example(path, {"place": "Nowhere"})
    assert steps["say"]["status"] == "skipped"
    assert outputs == {"found": 0, "said": "no place called Nowhere"}


async def test_resilient_goes_on_after_the_failing_step(run_example: RunExample) -> None:
    steps, outputs = await run_example(REPO / "examples" / "routines" / "resilient.yaml", {})
    assert steps["flaky"]["status"] == "failed" and steps["fallback"]["status"] == "succeeded"
    assert outputs == {"flaky": "failed", "report": "flaky: failed, fallback: succeeded"}
    # its tool said retryable: the step's retry policy ran it twice (the test server skips the 1 s backoff)
    flaky = steps["flaky"]
    assert flaky["attempts"] == 2
    assert (flaky["error"]["code"], flaky["error"]["reason"], flaky["error"]["tool_code"]) == (
        "tool_failed",
        "tool_error",
        "upstream_down",
    )


async def test_morning_report_declares_its_schedules_and_runs_with_a_schedules_inputs(
    run_example: RunExample,
) -> None:
    path = REPO / "examples" / "routines" / "morning-report.yaml"
    routine = load_routine_file(path, PACKS)
    assert routine.on is not None
    friday = routine.on.schedule[1]
    assert [(s.cron, s.timezone, s.overlap) for s in routine.on.schedule] == [
        ("0 7 * * 1-5", "Europe/Paris", "skip"),
        ("30 16 * * FRI", "Europe/Paris", "buffer_one"),
    ]
    steps, outputs = await run_example(path, friday.inputs)
    assert steps["summary"]["status"] == "succeeded"
    assert outputs == {"greeting": "good morning everyone", "summary": "succeeded"}
