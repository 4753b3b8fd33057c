"""Every example routine validates, fits the JSON Schema, and evaluates step by step."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine import expressions as ex
from engine.resolvers import LocalPackResolver
from engine.routine import Routine
from engine.validate import load_routine_file, resolve_inputs

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "routines").glob("*.yaml"))
ECHO_DIR = REPO / "examples" / "tools" / "echo"
PACK_DIRS = [ECHO_DIR, *sorted(p for p in (REPO / "examples" / "packs").iterdir() if p.is_dir())]
PLACES = [{"name": "Berlin", "latitude": 52.52, "longitude": 13.41, "timezone": "Europe/Berlin"}]
MODELINE = "# yaml-language-server: $schema=../../docs/routine.schema.json"


def test_there_are_examples_and_hello_is_one_of_them() -> None:
    assert "hello.yaml" in [p.name for p in EXAMPLES]
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_the_example_packs(path: Path) -> None:
    routine = load_routine_file(path, LocalPackResolver(PACK_DIRS))
    assert routine.steps
    assert path.read_text().splitlines()[0] == MODELINE


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_fits_the_committed_json_schema(path: Path) -> None:
    schema = json.loads((REPO / "docs" / "routine.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(path.read_text()))


def _manifest_schemas() -> dict[str, dict[str, Any]]:
    schemas = {}
    for root in PACK_DIRS:
        manifest = json.loads((root / "b3pack.json").read_text())
        schemas.update({a["key"]: a["inputSchema"] for a in manifest["actions"]})
    return schemas


def _echo_stand_in(action: str, call_input: dict[str, Any]) -> tuple[str, Any]:
    """What the echo tool (and the Open-Meteo search) answer; both run for real in the stack tests."""
    if action == "search-places":
        return "succeeded", {"places": PLACES if call_input["name"] == "Berlin" else []}
    if action == "noop":
        return "succeeded", {}
    if action == "fail":
        return "failed", None
    output: dict[str, Any] = {"text": call_input["text"]}
    if "file" in call_input:
        data = base64.b64decode(call_input["file"]["$bytes"])
        output["file"] = {**call_input["file"], "bytes": len(data), "contentType": "text/plain"}
    return "succeeded", output


def run_in_memory(routine: Routine, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate a routine's expressions step by step as the workflow does, with echo stand-ins."""
    schemas = _manifest_schemas()
    context: dict[str, Any] = {"inputs": resolve_inputs(routine, given), "steps": {}}
    for step in routine.steps:
        action = step.uses.split("/")[2].split("@")[0]
        if not ex.evaluate_condition(step.if_, context):
            context["steps"][step.id] = {"status": "skipped", "output": None}
            continue
        scopes = (
            [context]
            if step.foreach is None
            else [
                {**context, "item": item, "index": i}
                for i, item in enumerate(ex.evaluate_foreach(step.foreach, context))
            ]
        )
        results = []
        for scope in scopes:
            call_input = ex.evaluate(step.with_, scope)
            jsonschema.Draft202012Validator(schemas[action]).validate(call_input)
            results.append(_echo_stand_in(action, call_input))
        status = "failed" if any(s == "failed" for s, _ in results) else "succeeded"
        assert status == "succeeded" or step.continue_on_error
        output = results[0][1] if step.foreach is None else [o for _, o in results]
        context["steps"][step.id] = {"status": status, "output": output}
    return context["steps"], ex.evaluate(routine.outputs, context)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_evaluates_with_its_default_inputs(path: Path) -> None:
    routine = load_routine_file(path)
    given = {name: ["ann", "bo"] for name, spec in routine.inputs.items() if spec.required}
    steps, outputs = run_in_memory(routine, given)
    assert set(steps) == {s.id for s in routine.steps}
    assert outputs.keys() == routine.outputs.keys()


def test_hello_chains_text_and_file_and_greets_each_friend() -> None:
    routine = load_routine_file(REPO / "examples" / "routines" / "hello.yaml")
    steps, outputs = run_in_memory(routine, {"name": "Ann", "friends": ["ada", "bob"]})
    assert steps["greet"]["output"]["text"] == "hello Ann"
    assert outputs["greeting"] == "hello Ann, again (2 friends next)"
    assert outputs["file"] == {
        "$bytes": "aGVsbG8K",
        "name": "hello.txt",
        "bytes": 6,
        "contentType": "text/plain",
    }
    assert outputs["friends"] == ["1. hello ada", "2. hello bob"]


def test_conditional_skips_the_long_report_unless_asked() -> None:
    routine = load_routine_file(REPO / "examples" / "routines" / "conditional.yaml")
    steps, outputs = run_in_memory(routine, {})
    assert steps["long"]["status"] == "skipped"
    assert outputs == {
        "report": "short report on the weekly numbers",
        "long_ran": False,
        "notice": "only the short report",
    }
    steps, outputs = run_in_memory(routine, {"detailed": True})
    assert outputs["long_ran"] is True and outputs["notice"] == "both reports"


def test_places_says_where_the_best_match_is_or_that_there_is_none() -> None:
    routine = load_routine_file(REPO / "examples" / "routines" / "places.yaml")
    _, outputs = run_in_memory(routine, {})
    assert outputs == {"found": 1, "said": "Berlin is at 52.52, 13.41"}
    steps, outputs = run_in_memory(routine, {"place": "Nowhere"})
    assert steps["say"]["status"] == "skipped"
    assert outputs == {"found": 0, "said": "no place called Nowhere"}


def test_resilient_goes_on_after_the_failing_step() -> None:
    routine = load_routine_file(REPO / "examples" / "routines" / "resilient.yaml")
    steps, outputs = run_in_memory(routine, {})
    assert steps["flaky"]["status"] == "failed" and steps["fallback"]["status"] == "succeeded"
    assert outputs == {"flaky": "failed", "report": "flaky: failed, fallback: succeeded"}
