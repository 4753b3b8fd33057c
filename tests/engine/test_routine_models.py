"""The routine models: durations, defaults, and the round trip the workflow's data converter makes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from engine.durations import duration_ms, parse_duration
from engine.routine import RetryPolicy, Routine
from engine.validate import load_routine_file

HELLO = Path(__file__).resolve().parents[2] / "examples" / "routines" / "hello.yaml"


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("30s", 30_000), ("2m", 120_000), ("1h", 3_600_000)]
)
def test_durations_read_as_milliseconds(text: str, ms: int) -> None:
    assert duration_ms(text) == ms
    assert parse_duration(text) == timedelta(milliseconds=ms)


@pytest.mark.parametrize("text", ["1.5s", "30 s", "s", "10d", "-1s", ""])
def test_bad_durations_say_what_a_duration_is(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: use a whole number and a unit"):
        duration_ms(text)


def test_retry_defaults() -> None:
    policy = RetryPolicy()
    assert (
        policy.max_attempts,
        policy.backoff_timedelta,
        policy.backoff_coefficient,
        policy.max_backoff_timedelta,
    ) == (
        3,
        timedelta(seconds=1),
        2.0,
        timedelta(seconds=60),
    )


def test_a_routine_survives_the_temporal_pydantic_converter_unchanged() -> None:
    routine = load_routine_file(HELLO)
    converter = pydantic_data_converter.payload_converter
    payload = converter.to_payloads([routine])
    (back,) = converter.from_payloads(payload, [Routine])
    assert back == routine
    assert back.steps[0].with_["file"] == {"$bytes": "aGVsbG8K", "name": "hello.txt"}
    assert back.inputs["name"].default == "world" and not back.inputs["name"].required
    assert back.step("friends").foreach == "${{ inputs.friends }}"


def test_an_input_without_default_is_required_and_its_schema_has_no_default() -> None:
    routine = Routine.model_validate(
        {
            "name": "x",
            "inputs": {"a": {"type": "string", "minLength": 2}, "b": {"type": "integer", "default": None}},
            "steps": [{"id": "s", "uses": "com.example.tools/echo/noop@1"}],
        }
    )
    assert routine.inputs["a"].required and not routine.inputs["b"].required
    assert routine.inputs["a"].json_schema() == {"type": "string", "minLength": 2}
