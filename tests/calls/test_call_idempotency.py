"""Idempotency-Key: one charge per key, a different request refused, concurrent requests share one call."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import loopback

from .calltest import call, error, step_headers, usage
from .stack import ECHO, FREE, WORKER_TOKEN, Stack


def test_the_same_key_twice_gets_the_stored_answer_and_one_charge(stack: Stack) -> None:
    org = stack.org()
    first = call(stack, org, f"{ECHO}/echo@1", {"text": "once"}, key="k-1")
    assert first.status_code == 200, first.text
    again = call(stack, org, f"{ECHO}/echo@1", {"text": "once"}, key="k-1", url=stack.api_urls[1])
    assert again.status_code == 200 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    used = usage(stack, org)
    assert used["calls"] == 1
    assert used["units"]["actions.publisher_microusd"] == 100
    assert used["cost"]["total"] == first.json()["cost"]["total"]


def test_the_same_key_in_another_organization_is_another_call(stack: Stack) -> None:
    a, b = stack.org(), stack.org()
    ra = call(stack, a, f"{ECHO}/noop@1", key="shared")
    rb = call(stack, b, f"{ECHO}/noop@1", key="shared")
    assert ra.status_code == rb.status_code == 200
    assert ra.json()["call_id"] != rb.json()["call_id"]


def test_the_same_key_with_a_different_request_is_422(stack: Stack) -> None:
    org = stack.org()
    assert call(stack, org, f"{ECHO}/echo@1", {"text": "a"}, key="k-2").status_code == 200
    err = error(call(stack, org, f"{ECHO}/echo@1", {"text": "b"}, key="k-2"), 422, "idempotency_key_reused")
    assert "'k-2' was already used for a different request" in err["message"]
    assert usage(stack, org)["calls"] == 1


def test_a_charged_failure_is_stored_too(stack: Stack) -> None:
    org = stack.org()
    body = {"mode": "exit", "exitCode": 4}
    first = call(stack, org, f"{ECHO}/fail@1", body, key="k-3")
    again = call(stack, org, f"{ECHO}/fail@1", body, key="k-3")
    assert first.status_code == again.status_code == 502
    assert again.json() == first.json()
    assert usage(stack, org)["units"]["actions.tool_call"] == 1


def test_a_tool_error_the_tool_calls_retryable_is_not_stored_so_the_retry_runs_again(stack: Stack) -> None:
    org = stack.org()
    body = {"mode": "tool_error", "code": "busy", "message": "try later", "retryable": True}
    first = error(call(stack, org, f"{ECHO}/fail@1", body, key="k-6"), 502, "tool_failed", "tool_error")
    second = error(call(stack, org, f"{ECHO}/fail@1", body, key="k-6"), 502, "tool_failed", "tool_error")
    assert first["retryable"] is second["retryable"] is True
    assert first["call_id"] != second["call_id"]
    used = usage(stack, org)
    assert used["units"]["actions.tool_call"] == 2  # two runs, each charged its floor once
    assert used["units"].get("actions.publisher_microusd", 0) == 0  # a failed call never pays the price


def test_a_retry_after_answer_is_not_stored_so_the_retry_runs(stack: Stack) -> None:
    org = stack.org()
    first = error(call(stack, org, f"{FREE}/noop@1", timeout_ms=1, key="k-4"), 503, "tool_unavailable")
    second = error(call(stack, org, f"{FREE}/noop@1", timeout_ms=1, key="k-4"), 503, "tool_unavailable")
    assert first["call_id"] != second["call_id"]
    assert first["reason"] == second["reason"] == "no_slot"


def test_concurrent_requests_with_one_key_share_one_call_across_api_processes(stack: Stack) -> None:
    org = stack.org()
    body = {"mode": "sleep", "seconds": 1}

    def one(i: int) -> httpx.Response:
        return call(stack, org, f"{ECHO}/fail@1", body, key="k-5", url=stack.api_urls[i % 2])

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(6)))
    assert {r.status_code for r in answers} == {200}
    assert len({r.json()["call_id"] for r in answers}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in answers) == 5
    used = usage(stack, org)
    assert used["calls"] == 1 and used["units"]["actions.publisher_microusd"] == 100


def test_the_routine_worker_calls_with_a_runs_grant_and_is_metered_under_its_key(stack: Stack) -> None:
    org = stack.org()
    headers = step_headers(stack, org, "routine-hello-run_wk1", "a")
    r = loopback.post(
        f"{stack.url}/v1/actions/call",
        headers=headers,
        json={"ref": f"{ECHO}/echo@1", "input": {"text": "from a routine"}},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == {"text": "from a routine"}
    used = usage(stack, org)
    assert [k["key_id"] for k in used["keys"]] == [org.key_id]
    # a key the step does not derive, and a call by id, are not the grant's to make
    other = {**headers, "Idempotency-Key": "wf-1/step-a"}
    r = loopback.post(
        f"{stack.url}/v1/actions/call", headers=other, json={"ref": f"{ECHO}/noop@1"}, timeout=60
    )
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "key_not_of_run")
    r = loopback.post(f"{stack.url}/v1/actions/calls/tcall_x/cancel", headers=headers, timeout=60)
    assert r.status_code == 403 and "cancels only its own call" in r.json()["error"]["message"]


def test_the_worker_token_alone_calls_for_no_one(stack: Stack) -> None:
    org = stack.org()
    for extra in ({}, {"X-B3OS-On-Behalf-Of": org.key_id}, {"X-B3OS-Run-Grant": "b3run_forged-grant"}):
        for path, body in (("/v1/actions/call", {"ref": f"{ECHO}/echo@1"}), ("/v1/actions/call/cancel", {})):
            bad = loopback.post(
                f"{stack.url}{path}",
                headers={"Authorization": f"Bearer {WORKER_TOKEN}", "Idempotency-Key": "k-1", **extra},
                json=body or {"idempotency_key": "k-1"},
                timeout=60,
            )
            assert bad.status_code == 401, bad.text
            message = bad.json()["error"]["message"]
            assert "X-B3OS-Run-Grant" in message and "POST /v1/routines/{name}/runs" in message
    assert usage(stack, org)["calls"] == 0
