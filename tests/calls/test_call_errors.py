"""Every error of a call, produced by a real failing tool, a real node or a real request."""

from __future__ import annotations

import base64
from typing import Any

import loopback
import pytest

from .calltest import call, error, step_headers, usage
from .stack import ECHO, FREE, Stack

FAIL = f"{ECHO}/fail@1"


@pytest.mark.parametrize(
    ("input_", "reason", "details"),
    [
        (
            {"mode": "tool_error", "code": "nope", "message": "said no", "retryable": True},
            "tool_error",
            {"tool_code": "nope", "tool_message": "said no", "retryable": True},
        ),
        ({"mode": "exit", "exitCode": 7}, "exit", {"exit_code": 7}),
        ({"mode": "signal", "signal": "KILL"}, "signal", {}),
        ({"mode": "bad_last_line"}, "protocol", {}),
        ({"mode": "bad_output"}, "output_invalid", {}),
        ({"mode": "bad_file"}, "output_file", {}),
        ({"mode": "huge_output"}, "output_too_large", {}),
    ],
)
def test_a_failing_tool_is_tool_failed_and_charged_compute_and_floor_never_the_price(
    stack: Stack, input_: dict[str, Any], reason: str, details: dict[str, Any]
) -> None:
    org = stack.org()
    err = error(call(stack, org, FAIL, input_), 502, "tool_failed", reason)
    for name, value in details.items():
        assert err[name] == value, err
    if reason == "signal":
        assert "KILL" in str(err["signal"]) or err["signal"] == 9, err
    if reason == "output_invalid":
        assert err["errors"][0]["path"] == "output", err
        assert "unexpected" in err["errors"][0]["message"]
    assert err["cost"]["floor"] == 10 and err["cost"]["price"] == 0
    assert err["cost"]["total"] == err["cost"]["compute"] + 10
    used = usage(stack, org)
    assert used["units"]["actions.tool_call"] == 1
    assert used["units"]["actions.publisher_microusd"] == 0
    assert used["cost"]["total"] == err["cost"]["total"]


def test_a_tool_that_runs_past_its_time_is_tool_timed_out_and_charged_compute_and_floor(stack: Stack) -> None:
    org = stack.org()
    err = error(call(stack, org, FAIL, {"mode": "sleep", "seconds": 30}), 504, "tool_timed_out")
    assert err["cost"]["floor"] == 10 and err["cost"]["price"] == 0
    assert usage(stack, org)["units"]["actions.tool_call"] == 1


def test_a_call_whose_time_ends_before_its_command_starts_is_no_slot_and_free(stack: Stack) -> None:
    org = stack.org()
    err = error(call(stack, org, f"{FREE}/noop@1", {}, timeout_ms=1), 503, "tool_unavailable")
    assert err["reason"] == "no_slot", err
    assert err["cost"]["total"] == 0
    used = usage(stack, org)
    assert used["units"]["actions.tool_call"] == 0 and used["cost"]["total"] == 0


@pytest.mark.parametrize(
    ("ref", "sentence"),
    [
        ("com.example.tools/nothing/echo@1", "pack com.example.tools/nothing is not in the registry"),
        ("com.example.tools/echo/echo@2", "com.example.tools/echo has no version 2.x.y (versions: 1.0.0)"),
        ("com.example.tools/echo/echo@1.0.1", "echo has no version 1.0.1 (versions: 1.0.0)"),
        ("com.example.tools/echo/shout@1", "has no action 'shout' (actions: noop, echo, fail)"),
    ],
)
def test_an_unknown_pack_version_or_action_is_404_naming_the_ref(
    stack: Stack, ref: str, sentence: str
) -> None:
    err = error(call(stack, stack.org(), ref, {"text": "x"}), 404, "not_found")
    assert err["message"].startswith(ref) and sentence in err["message"], err


def test_a_priced_action_refuses_a_timeout_below_its_own(stack: Stack) -> None:
    err = error(
        call(stack, stack.org(), f"{ECHO}/echo@1", {"text": "x"}, timeout_ms=9999), 400, "invalid_request"
    )
    assert "timeout_ms 9999 is below this priced action's own timeout of 10000 ms" in err["message"]
    assert err["field"] == "timeout_ms"


def test_a_routine_steps_call_of_a_priced_action_runs_to_its_own_timeout(stack: Stack) -> None:
    """The seed: a step's `timeout` below a priced action's own does not refuse every run of the routine."""
    org = stack.org()
    r = loopback.post(
        f"{stack.url}/v1/actions/call",
        headers=step_headers(stack, org, "routine-short-run_tm1", "a"),
        json={"ref": f"{ECHO}/echo@1", "input": {"text": "x"}, "timeout_ms": 1},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == {"text": "x"}


def test_a_free_action_takes_a_shorter_timeout(stack: Stack) -> None:
    r = call(stack, stack.org(), f"{FREE}/echo@1", {"text": "x"}, timeout_ms=5000)
    assert r.status_code == 200, r.text
    assert r.json()["cost"]["price"] == 0


@pytest.mark.parametrize(
    ("input_", "sentence"),
    [
        ({}, "input: 'text' is a required property"),
        ({"text": 5}, "input.text: 5 is not of type 'string'"),
        (
            {"text": "x", "file": {"$bytes": "aGk=", "name": "a/b"}},
            "input.file.name 'a/b' is not a file name",
        ),
        ({"text": "x", "file": {"$bytes": "aGk=", "name": "a.png"}}, "input.file: content type image/png"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_costs_nothing(
    stack: Stack, input_: dict[str, Any], sentence: str
) -> None:
    org = stack.org()
    err = error(call(stack, org, f"{ECHO}/echo@1", input_), 400, "invalid_request")
    assert err["message"].startswith(sentence), err
    assert usage(stack, org)["calls"] == 0


def test_a_request_body_over_1_mib_is_refused(stack: Stack) -> None:
    big = base64.b64encode(b"x" * (800 * 1024)).decode()  # 1,092,268 base64 characters
    err = error(
        call(stack, stack.org(), f"{ECHO}/echo@1", {"text": "x", "file": {"$bytes": big, "name": "a.txt"}}),
        413,
        "payload_too_large",
    )
    assert "more than the 1048576 bytes a call may send" in err["message"]


def test_a_call_without_a_key_or_scope_is_refused(stack: Stack) -> None:
    r = loopback.post(f"{stack.url}/v1/actions/call", json={"ref": f"{ECHO}/noop@1", "input": {}})
    assert r.status_code == 401, r.text
    org = stack.org(scopes=["routines:read"])
    err = error(call(stack, org, f"{ECHO}/noop@1"), 403, "forbidden")
    assert "actions:call" in err["message"]


@pytest.mark.parametrize(
    ("body", "sentence"),
    [
        ({"input": {}}, "the field ref is required"),
        ({"ref": "echo", "input": {}}, "action ref 'echo' has no version"),
        ({"ref": f"{ECHO}/noop@1", "input": []}, "input must be a JSON object, not list"),
        ({"ref": f"{ECHO}/noop@1", "timeout_ms": "5"}, "timeout_ms must be a whole number"),
        ({"ref": f"{ECHO}/noop@1", "extra": 1}, "the field extra is not accepted here"),
    ],
)
def test_a_malformed_request_is_400_naming_the_field(
    stack: Stack, body: dict[str, Any], sentence: str
) -> None:
    org = stack.org()
    r = loopback.post(f"{stack.url}/v1/actions/call", headers=org.headers, json=body, timeout=30)
    err = error(r, 400, "invalid_request")
    assert sentence in err["message"], err
