"""The routine JSON Schema: committed copy up to date, printed by the CLI, strict where the models are."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from engine.schema import routine_json_schema, routine_json_schema_text

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "docs" / "routine.schema.json"
HELLO = yaml.safe_load((REPO / "examples" / "routines" / "hello.yaml").read_text())


def test_committed_schema_is_up_to_date() -> None:
    assert COMMITTED.read_text() == routine_json_schema_text(), (
        "docs/routine.schema.json is stale: run `b3os routine schema -o docs/routine.schema.json`"
    )


def test_schema_is_a_valid_draft_2020_12_schema_with_descriptions() -> None:
    schema = routine_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    step = schema["$defs"]["Step"]["properties"]
    assert set(step) == {
        "id",
        "uses",
        "with",
        "needs",
        "if",
        "timeout",
        "retry",
        "continue-on-error",
        "foreach",
        "name",
    }
    assert all(prop.get("description") for prop in step.values())
    assert step["timeout"]["pattern"] == "^[0-9]{1,9}(ms|s|m|h)$"
    assert "string" in schema["$defs"]["InputSpec"]["properties"]["type"]["enum"]


def test_cli_prints_the_same_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cli", "routine", "schema"], capture_output=True, text=True, check=True
    )
    assert out.stdout == COMMITTED.read_text()


def _broken(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(HELLO)
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("what", "doc"),
    [
        ("an unknown step field", _broken(lambda d: d["steps"][0].update(retries=3))),
        ("a bad uses ref", _broken(lambda d: d["steps"][0].update(uses="echo"))),
        ("a bad duration", _broken(lambda d: d["steps"][0].update(timeout="30 seconds"))),
        ("a hyphen in a step id", _broken(lambda d: d["steps"][0].update(id="say-hi"))),
        ("no steps", _broken(lambda d: d.update(steps=[]))),
        ("no name", _broken(lambda d: d.pop("name"))),
        ("max-attempts 0", _broken(lambda d: d["steps"][0].update(retry={"max-attempts": 0}))),
        ("an unknown retry field", _broken(lambda d: d["steps"][0].update(retry={"max_attempts": 2}))),
        (
            "an input name with a hyphen",
            _broken(lambda d: d["inputs"].update({"my-name": {"type": "string"}})),
        ),
        ("an unknown input type", _broken(lambda d: d["inputs"]["name"].update(type="text"))),
    ],
)
def test_schema_rejects_a_broken_routine(what: str, doc: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(COMMITTED.read_text()))
    assert validator.is_valid(HELLO)
    assert not validator.is_valid(doc), what
