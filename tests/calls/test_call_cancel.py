"""Cancelling a running call through the api: by its Idempotency-Key or its id, its node kills the VM."""

from __future__ import annotations

import threading
import time

import httpx
import loopback
from workers import PATIENCE_S

from .calltest import call, error, running, wait_vm_command
from .stack import ECHO, FREE, Org, Stack

SLEEPY = {"mode": "sleep", "seconds": 30}


def _cancel(stack: Stack, org: Org, key: str) -> httpx.Response:
    return loopback.post(
        f"{stack.url}/v1/actions/call/cancel", headers=org.headers, json={"idempotency_key": key}, timeout=30
    )


class Pending:
    """A call sleeping in its VM, sent from a thread."""

    def __init__(self, stack: Stack, org: Org, ref: str, key: str | None = None) -> None:
        self.answers: list[httpx.Response] = []
        self.thread = threading.Thread(
            target=lambda: self.answers.append(call(stack, org, ref, SLEEPY, key=key))
        )
        self.thread.start()
        deadline = time.monotonic() + PATIENCE_S
        while running(stack, org) < 1:
            assert time.monotonic() < deadline, "the call did not start"
            time.sleep(0.02)
        wait_vm_command(stack, "sleep 30 ")  # the command sleeps in its VM

    def answer(self) -> httpx.Response:
        self.thread.join(timeout=15)
        (answer,) = self.answers
        return answer


def test_a_call_cancelled_by_its_key_ends_at_once_billed_like_a_failure(stack: Stack) -> None:
    org = stack.org()
    pending = Pending(stack, org, f"{ECHO}/fail@1", key="cancel-me")
    r = _cancel(stack, org, "cancel-me")
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["state"] == "cancelled" and body["node"] == "killed" and body["call_id"].startswith("tcall_")
    answer = pending.answer()
    err = error(answer, 502, "tool_failed", "signal")  # killed, not timed out at the action's 5 s
    assert err["signal"] == 9 and err["call_id"] == body["call_id"]
    assert err["message"] == "the tool was killed by signal 9 (SIGKILL) (the call was cancelled)"
    cost = err["cost"]
    assert cost["price"] == 0 and cost["compute"] > 0 and cost["floor"] > 0  # never the 100 micro-USD price
    assert cost["total"] == cost["compute"] + cost["floor"]
    # the key's answer is the cancelled call's, replayed; a second cancel finds it finished
    replay = call(stack, org, f"{ECHO}/fail@1", SLEEPY, key="cancel-me")
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json() == answer.json()
    again = _cancel(stack, org, "cancel-me")
    assert (again.status_code, again.json()) == (200, {"call_id": body["call_id"], "state": "finished"})


def test_a_call_cancelled_by_its_id_ends_at_once(stack: Stack) -> None:
    org = stack.org()
    pending = Pending(stack, org, f"{FREE}/fail@1")
    with stack.engine.connect() as conn:
        (call_id,) = conn.exec_driver_sql(
            "SELECT id FROM action_calls WHERE org_id = ? AND state = 'running'", (org.org_id,)
        ).one()
    other = stack.org()
    r = loopback.post(f"{stack.url}/v1/actions/calls/{call_id}/cancel", headers=other.headers, timeout=30)
    assert r.status_code == 404, r.text  # another organization's call is not found
    r = loopback.post(f"{stack.url}/v1/actions/calls/{call_id}/cancel", headers=org.headers, timeout=30)
    assert (r.status_code, r.json()) == (202, {"call_id": call_id, "state": "cancelled", "node": "killed"})
    error(pending.answer(), 502, "tool_failed", "signal")


def test_cancel_refuses_unknown_keys_and_bad_bodies(stack: Stack) -> None:
    org = stack.org()
    err = error(_cancel(stack, org, "never-sent"), 404, "not_found")
    assert err["message"] == "this organization has no call with Idempotency-Key 'never-sent'"
    r = loopback.post(
        f"{stack.url}/v1/actions/call/cancel", headers=org.headers, json={"key": "x"}, timeout=30
    )
    assert error(r, 400, "invalid_request")["field"] == "key"
    r = loopback.post(f"{stack.url}/v1/actions/call/cancel", headers=org.headers, json={}, timeout=30)
    err = error(r, 400, "invalid_request")
    assert err["field"] == "idempotency_key"
    assert err["message"] == (
        "the field idempotency_key is required: the Idempotency-Key the call was sent with"
    )
    r = loopback.post(f"{stack.url}/v1/actions/call/cancel", json={"idempotency_key": "x"}, timeout=30)
    assert r.status_code == 401
