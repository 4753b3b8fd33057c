"""The step activity over real HTTP against the STAND-IN api of stand_in_api.py, which scripts each
error answer; the real POST /v1/actions/call is exercised in tests/engine/test_workflow_e2e.py."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from pydantic import SecretStr
from stand_in_api import Answer, StandInApi, problem
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.call_action import ActionActivities, CallActionInput
from activities.config import ActivitySettings
from activities.idempotency import step_idempotency_key

TOKEN = "wkr_s3cret-token-value"
REF = "com.example.tools/echo/echo@1"


def _activities(url: str) -> ActionActivities:
    return ActionActivities(ActivitySettings(api_url=url, worker_token=SecretStr(TOKEN)))


async def _run(url: str, **kw: object) -> object:
    env = ActivityEnvironment()
    acts = _activities(url)
    fields: dict[str, object] = {"ref": REF, "input": {"text": "hi"}, "key_id": "key_123", "step_id": "echo"}
    fields.update(kw)
    try:
        return await env.run(acts.call_action, CallActionInput.model_validate(fields))
    finally:
        await acts.aclose()


async def _error(url: str, **kw: object) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await _run(url, **kw)
    return info.value


async def test_call_sends_ref_input_worker_token_key_id_and_derived_key(stand_in: StandInApi) -> None:
    result = await _run(stand_in.url, index=2)
    assert result.output == {"text": "hi"}  # type: ignore[attr-defined]
    (req,) = stand_in.requests
    assert req.body == {"ref": REF, "input": {"text": "hi"}}  # no timeout_ms unless the step sets one
    assert req.headers["authorization"] == f"Bearer {TOKEN}"
    assert req.headers["x-b3os-on-behalf-of"] == "key_123"
    assert req.key == step_idempotency_key("test", "echo", 2)
    assert req.key.startswith("step_") and len(req.key) == 5 + 64


async def test_step_timeout_is_sent_as_timeout_ms(stand_in: StandInApi) -> None:
    await _run(stand_in.url, timeout_ms=2500)
    assert stand_in.requests[0].body["timeout_ms"] == 2500


def test_key_is_stable_and_differs_per_step_and_index() -> None:
    key = step_idempotency_key("routine-hello-r1", "echo", None)
    assert key == step_idempotency_key("routine-hello-r1", "echo", None)
    others = {
        step_idempotency_key("routine-hello-r2", "echo", None),
        step_idempotency_key("routine-hello-r1", "echo2", None),
        step_idempotency_key("routine-hello-r1", "echo", 0),
    }
    assert key not in others and len(others) == 3


@pytest.mark.parametrize(
    ("status", "code"), [(503, "tool_unavailable"), (429, "rate_limited"), (429, "concurrency_limited")]
)
async def test_busy_answers_retry_after_exactly_their_retry_after(
    stand_in: StandInApi, status: int, code: str
) -> None:
    stand_in.script(REF, [problem(status, code, "no_slot", "no VM is free", retry_after=7)])
    err = await _error(stand_in.url)
    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=7)
    assert err.type == code
    assert err.details[0]["retry_after"] == 7


@pytest.mark.parametrize(
    ("answer", "code", "reason"),
    [
        (
            problem(400, "invalid_request", None, "input.text: 5 is not of type 'string'"),
            "invalid_request",
            None,
        ),
        (problem(422, "invalid_input", "schema", "input.text is required"), "invalid_input", "schema"),
        (
            problem(502, "tool_failed", "exit", "the command exited with 3", exit_code=3),
            "tool_failed",
            "exit",
        ),
        (
            problem(502, "tool_failed", "output_invalid", "output.text is required"),
            "tool_failed",
            "output_invalid",
        ),
        (
            problem(404, "action_not_found", None, "no action com.example.tools/echo/nope@1"),
            "action_not_found",
            None,
        ),
    ],
)
async def test_refusals_and_tool_failures_are_not_retried(
    stand_in: StandInApi, answer: Answer, code: str, reason: str | None
) -> None:
    stand_in.script(REF, [answer])
    err = await _error(stand_in.url)
    assert err.non_retryable
    assert err.type == code
    details = err.details[0]
    assert (details["code"], details["reason"]) == (code, reason)
    assert details["message"] == answer.body["error"]["message"]  # type: ignore[index]
    assert details["message"] in str(err)


async def test_a_tool_error_that_says_retryable_is_retried_with_backoff(stand_in: StandInApi) -> None:
    stand_in.script(
        REF, [problem(502, "tool_failed", "tool_error", "upstream busy", retryable=True, tool_code="busy")]
    )
    err = await _error(stand_in.url)
    assert not err.non_retryable and err.next_retry_delay is None
    assert err.details[0]["tool_code"] == "busy"


async def test_api_unreachable_is_retryable_and_names_the_url(stand_in: StandInApi) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    err = await _error(url)
    assert not err.non_retryable
    assert err.type == "api_unreachable"
    assert url in err.message
    assert TOKEN not in str(err.details)


async def test_no_error_carries_the_worker_token(stand_in: StandInApi) -> None:
    stand_in.script(REF, [problem(401, "unauthorized", None, "the worker token is not valid")])
    err = await _error(stand_in.url)
    assert err.non_retryable
    assert TOKEN not in str(err) and TOKEN not in str(err.details)
