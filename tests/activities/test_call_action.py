"""The step activity against the real POST /v1/actions/call of a real api process and node (the
session's stack of tests/realstack.py), and its error mapping as a pure function of HTTP answers."""

from __future__ import annotations

import dataclasses
import socket
from datetime import timedelta
from typing import Any

import httpx
import pytest
from calls.stack import WORKER_TOKEN
from pydantic import SecretStr
from realstack import FREE_ECHO, FREE_FAIL, RoutineStack
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from activities.errors import error_for_response, is_wait
from activities.idempotency import step_idempotency_key
from engine.steps import CallActionInput, CallActionResult

# ActivityEnvironment runs the activity as if in workflow "test"
WORKFLOW_ID = "test"


async def _run(
    url: str, key_id: str, token: str = WORKER_TOKEN, env: ActivityEnvironment | None = None, **kw: Any
) -> CallActionResult:
    acts = ActionActivities(ActivitySettings(api_url=url, worker_token=SecretStr(token)))
    fields: dict[str, Any] = {"ref": FREE_ECHO, "input": {"text": "hi"}, "key_id": key_id, "step_id": "echo"}
    fields.update(kw)
    try:
        result: CallActionResult = await (env or ActivityEnvironment()).run(
            acts.call_action, CallActionInput.model_validate(fields)
        )
        return result
    finally:
        await acts.aclose()


async def _error(
    url: str, key_id: str, env: ActivityEnvironment | None = None, **kw: Any
) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await _run(url, key_id, env=env, **kw)
    return info.value


async def test_a_call_runs_on_behalf_of_the_key_under_the_derived_key(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    grant = routine_stack.grant(org)
    result = await _run(routine_stack.url, org.key_id, grant=grant, step_id="say", index=2, timeout_ms=2500)
    assert result.output == {"text": "hi"} and result.attempt == 1
    assert result.cost is not None and result.cost["total"] > 0
    (call,) = routine_stack.calls_of(org)
    assert (call.id, call.key_id, call.surface, call.timeout_ms) == (
        result.call_id,
        org.key_id,
        "routine",
        2500,
    )
    assert routine_stack.stored_keys(org) == {step_idempotency_key(WORKFLOW_ID, "say", 2): call.id}
    # the same step again is the same key: the stored answer, no second call
    again = await _run(routine_stack.url, org.key_id, grant=grant, step_id="say", index=2, timeout_ms=2500)
    assert again.call_id == call.id and len(routine_stack.calls_of(org)) == 1


async def test_the_apis_refusals_and_tool_errors_become_their_codes(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    grant = routine_stack.grant(org)
    err = await _error(routine_stack.url, org.key_id, grant=grant, input={"text": 5})
    assert (err.type, err.non_retryable, err.details[0]["status"]) == ("invalid_request", True, 400)
    assert err.details[0]["message"] == "input.text: 5 is not of type 'string'"
    nope = "com.example.tools/free/nope@1"
    err = await _error(routine_stack.url, org.key_id, grant=grant, ref=nope, step_id="b")
    assert (err.type, err.non_retryable, err.details[0]["status"]) == ("not_found", True, 404)
    tool_error = {"mode": "tool_error", "code": "busy", "message": "try later", "retryable": True}
    err = await _error(
        routine_stack.url, org.key_id, grant=grant, ref=FREE_FAIL, input=tool_error, step_id="c"
    )
    assert (err.type, err.non_retryable, err.next_retry_delay) == ("tool_failed", False, None)
    assert (err.details[0]["reason"], err.details[0]["tool_code"]) == ("tool_error", "busy")
    assert err.details[0]["idempotency_key"] == step_idempotency_key(WORKFLOW_ID, "c", None)


async def test_a_wrong_worker_token_is_refused_and_never_shown(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    wrong = "wkr_not-the-token-s3cret"
    with pytest.raises(ApplicationError) as info:
        await _run(routine_stack.url, org.key_id, token=wrong, grant=routine_stack.grant(org))
    err = info.value
    assert (err.type, err.non_retryable, err.details[0]["status"]) == ("unauthorized", True, 401)
    assert wrong not in str(err) and wrong not in str(err.details)
    assert routine_stack.calls_of(org) == []


async def test_a_call_without_its_runs_grant_is_refused_and_charges_no_one(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    err = await _error(routine_stack.url, org.key_id)
    assert (err.type, err.non_retryable, err.details[0]["status"]) == ("unauthorized", True, 401)
    assert err.details[0]["message"].startswith("The worker token alone calls nothing")
    # a grant of another run (another workflow) does not cover this workflow's keys
    other = routine_stack.grant(org, workflow_id="routine-other-run_1")
    err = await _error(routine_stack.url, org.key_id, grant=other)
    assert (err.type, err.details[0]["status"], err.details[0]["reason"]) == (
        "forbidden",
        403,
        "key_not_of_run",
    )
    expired = routine_stack.grant(org, lasts_s=-120)
    err = await _error(routine_stack.url, org.key_id, grant=expired)
    assert (err.type, err.details[0]["status"], err.details[0]["reason"]) == ("forbidden", 403, "run_ended")
    assert "outlived its execution timeout" in err.message
    assert routine_stack.calls_of(org) == []


async def test_a_quick_call_sends_no_heartbeat_and_a_longer_one_carries_the_ledger(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    grant = routine_stack.grant(org)
    env, beats = ActivityEnvironment(), []
    env.on_heartbeat = lambda *details: beats.append(details)
    await _run(routine_stack.url, org.key_id, env=env, grant=grant)
    assert beats == []  # one request to Temporal fewer per call
    slow = {"ref": FREE_FAIL, "input": {"mode": "sleep", "seconds": 2}, "step_id": "slow"}
    await _run(routine_stack.url, org.key_id, env=env, grant=grant, **slow)
    assert beats and all(b == ({"failures": 0, "closed": 0},) for b in beats), beats


@pytest.mark.parametrize(
    ("attempt", "details", "failures"),
    [
        (1, [], 0),
        (2, [{"failures": 0, "closed": 0}], 1),  # attempt 1 never closed: it timed out or its worker died
        (4, [{"failures": 1, "closed": 1}], 3),  # attempts 2 and 3 never closed
        (3, [{"failures": 1, "closed": 2}], 1),  # both closed, one of them as a failure
        (2, [{"failures": 1, "open": True}], 2),  # the ledger of a worker before `closed`
        (2, [{"failures": 1, "open": False}], 1),
        (3, [], 2),  # neither earlier attempt left a ledger: both died before they heartbeated
        (2, ["garbage"], 1),
    ],
)
async def test_attempts_that_never_closed_count_against_max_attempts(
    attempt: int, details: list[Any], failures: int
) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt, heartbeat_details=details)
    unreachable = "http://127.0.0.1:9"
    # one attempt left: the call is sent (to an api that is not there)
    err = await _error(unreachable, "key_1", env=env, max_attempts=failures + 1)
    assert err.type == "api_unreachable"
    if failures:  # none left: the step fails for good before any call
        err = await _error(unreachable, "key_1", env=env, max_attempts=failures)
        assert (err.type, err.non_retryable) == ("step_timed_out", True)
        assert err.message == f"the step's call did not finish in time in {failures} attempt(s)"


async def test_an_unreachable_api_is_retryable_and_named() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    err = await _error(url, "key_1")
    assert (err.type, err.non_retryable) == ("api_unreachable", False)
    assert url in err.message and WORKER_TOKEN not in str(err.details)
    # refused: nothing reached an api (one restarting), so the step waits 1 s and it is no failed attempt
    assert err.next_retry_delay == timedelta(seconds=1) and is_wait(err)


def test_key_is_stable_and_differs_per_step_and_index() -> None:
    key = step_idempotency_key("routine-hello-r1", "echo", None)
    assert key == step_idempotency_key("routine-hello-r1", "echo", None)
    assert key.startswith("step_") and len(key) == 5 + 64
    others = {
        step_idempotency_key("routine-hello-r2", "echo", None),
        step_idempotency_key("routine-hello-r1", "echo2", None),
        step_idempotency_key("routine-hello-r1", "echo", 0),
    }
    assert key not in others and len(others) == 3


# --- the mapping alone: constructed HTTP answers in the api's error shape --------------------------


def _answer(status: int, code: str, reason: str | None, message: str, **extra: Any) -> httpx.Response:
    headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else {}
    err: dict[str, Any] = {"code": code, "message": message, **extra}
    if reason is not None:
        err["reason"] = reason
    return httpx.Response(status, json={"error": err}, headers=headers)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (503, "tool_unavailable"),
        (429, "rate_limited"),
        (429, "concurrency_limited"),
        (429, "quota_exceeded"),
        (409, "idempotency_in_progress"),
    ],
)
def test_busy_answers_retry_after_exactly_their_retry_after(status: int, code: str) -> None:
    err = error_for_response(_answer(status, code, None, "busy", retry_after=7), attempt=3, key="step_k")
    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=7)
    assert err.type == code
    assert {k: err.details[0][k] for k in ("retry_after", "attempt", "idempotency_key")} == {
        "retry_after": 7,
        "attempt": 3,
        "idempotency_key": "step_k",
    }


@pytest.mark.parametrize(
    ("response", "code", "reason"),
    [
        (
            _answer(400, "invalid_request", None, "input.text: 5 is not of type 'string'"),
            "invalid_request",
            None,
        ),
        (
            _answer(502, "tool_failed", "exit", "the tool exited with status 3", exit_code=3),
            "tool_failed",
            "exit",
        ),
        (
            _answer(502, "tool_failed", "output_invalid", "output.x is not allowed"),
            "tool_failed",
            "output_invalid",
        ),
        (_answer(502, "tool_failed", "tool_error", "no", retryable=False), "tool_failed", "tool_error"),
        (_answer(404, "not_found", None, "no action com.example.tools/echo/nope@1"), "not_found", None),
        (_answer(504, "tool_timed_out", None, "too slow"), "tool_timed_out", None),
    ],
)
def test_refusals_and_tool_failures_are_not_retried(
    response: httpx.Response, code: str, reason: str | None
) -> None:
    err = error_for_response(response, attempt=1)
    assert err.non_retryable
    details = err.details[0]
    assert (err.type, details["code"], details["reason"]) == (code, code, reason)
    assert details["message"] == response.json()["error"]["message"] and details["message"] in str(err)


def test_a_tool_error_that_says_retryable_and_other_5xx_retry_with_the_backoff() -> None:
    retryable = _answer(502, "tool_failed", "tool_error", "upstream busy", retryable=True, tool_code="busy")
    for response in (retryable, httpx.Response(500, text="?")):
        err = error_for_response(response, attempt=1)
        assert not err.non_retryable and err.next_retry_delay is None, response
    assert error_for_response(httpx.Response(500, text="?"), attempt=1).details[0]["code"] == "http_500"
