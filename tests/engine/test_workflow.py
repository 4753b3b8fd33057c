"""The routine workflow through real parts only: the runs API of a real api process starts the run on
the Temporal dev server, a real worker process runs it, each step calls the real POST
/v1/actions/call, and a real node runs the echo tool in a VM (tests/realstack.py).

Retry-After, failures and retries are the api's own answers: a real 429 concurrency_limited while
the organization runs 4 sleeping calls, the echo tool's `fail` action asked for a tool error, a bad
output, or a long sleep to cancel.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, timedelta
from typing import Any

import httpx
import loopback
from calls.calltest import wait_vm_command
from calls.stack import PRICEY, Org
from realstack import ECHO_REF, FAIL_REF, FREE_ECHO, FREE_FAIL, RoutineStack
from sqlmodel import Session, col, select
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from workers import PATIENCE_S

from activities.idempotency import step_idempotency_key
from api.calls.tables import RUNNING, ActionCall, CallCancel
from engine.workflow import RoutineWorkflow

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED


def at(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime(tzinfo=UTC).timestamp()


def events(history: list[HistoryEvent], kind: EventType.ValueType) -> list[HistoryEvent]:
    return [e for e in history if e.event_type == kind]


def failure_details(event: HistoryEvent) -> dict[str, Any]:
    """The first detail of the last failure an ActivityTaskStarted event carries."""
    payloads = event.activity_task_started_event_attributes.last_failure.application_failure_info.details
    detail: dict[str, Any] = pydantic_data_converter.payload_converter.from_payloads(
        payloads.payloads, [dict]
    )[0]
    return detail


async def test_steps_chain_outputs_with_foreach_if_and_continue_on_error(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = f"""\
name: chain
inputs:
  who: {{type: string}}
  names: {{type: array}}
  loud: {{type: boolean, default: true}}
steps:
  - id: greet
    uses: {FREE_ECHO}
    with: {{text: "hello ${{{{ inputs.who }}}}"}}
  - id: shout
    uses: {ECHO_REF}
    with: {{text: "${{{{ steps.greet.output.text }}}}!"}}
  - id: each
    uses: {FREE_ECHO}
    foreach: ${{{{ inputs.names }}}}
    with: {{text: "${{{{ index }}}}:${{{{ item }}}}"}}
  - id: quiet
    uses: {FREE_ECHO}
    if: ${{{{ !inputs.loud }}}}
    with: {{text: never}}
  - id: flaky
    uses: {FREE_FAIL}
    continue-on-error: true
    with: {{mode: tool_error, code: upstream_down, message: the upstream is down}}
  - id: after
    uses: {FREE_ECHO}
    with: {{text: "${{{{ steps.flaky.status }}}}"}}
outputs:
  shout: ${{{{ steps.shout.output.text }}}}
  each: ${{{{ steps.each.output }}}}
  after: ${{{{ steps.after.output.text }}}}
"""
    run = await routine_stack.run(org, source, {"who": "ann", "names": ["a", "b", "c"]})

    assert run["status"] == "succeeded", run
    assert run["outputs"] == {
        "shout": "hello ann!",
        "each": [{"text": "0:a"}, {"text": "1:b"}, {"text": "2:c"}],
        "after": "failed",
    }
    steps = run["steps"]
    assert steps["greet"] == {
        "status": "succeeded",
        "attempts": 1,
        "ref": "com.example.tools/free/echo@1.0.0",
        "output": {"text": "hello ann"},
        "error": None,
    }
    assert steps["quiet"]["status"] == "skipped"
    flaky = steps["flaky"]
    assert (flaky["status"], flaky["attempts"]) == ("failed", 1)
    assert (flaky["error"]["code"], flaky["error"]["reason"]) == ("tool_failed", "tool_error")
    assert flaky["error"]["tool_code"] == "upstream_down" and flaky["error"]["retryable"] is False
    assert "the upstream is down" in flaky["error"]["message"]
    # each call ran once on the node, on behalf of the run's key, under its step's derived key
    wf = run["workflow_id"]
    keys = {step_idempotency_key(wf, s, None) for s in ("greet", "shout", "flaky", "after")}
    keys |= {step_idempotency_key(wf, "each", i) for i in range(3)}
    stored = routine_stack.stored_keys(org)
    calls = routine_stack.calls_of(org)
    assert set(stored) == keys
    assert sorted(c.id for c in calls) == sorted(stored.values())
    assert {(c.key_id, c.surface) for c in calls} == {(org.key_id, "routine")}
    assert [c.price for c in calls if c.pack.endswith("/echo")] == [100]  # shout, the priced echo
    # the history replays without nondeterminism (foreach in parallel included)
    handle = routine_stack.temporal_client.get_workflow_handle(wf)
    replayer = Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(await handle.fetch_history())


async def _sleepers(
    stack: RoutineStack,
    client: httpx.AsyncClient,
    org: Org,
    url: str,
    n: int,
    ref: str = FREE_FAIL,
    timeout_ms: int = 2000,
) -> list[asyncio.Task[httpx.Response]]:
    """n calls of `ref` (an echo's `fail`) sleeping, each cut at `timeout_ms`, started over HTTP; returns
    once all run."""
    body = {"ref": ref, "input": {"mode": "sleep", "seconds": 60}, "timeout_ms": timeout_ms}
    tasks = [
        asyncio.ensure_future(client.post(f"{url}/v1/actions/call", json=body, headers=org.headers))
        for _ in range(n)
    ]
    deadline = time.monotonic() + PATIENCE_S
    while _running(stack, org) < n:
        assert time.monotonic() < deadline, [t.result().text for t in tasks if t.done()]
        await asyncio.sleep(0.02)
    return tasks


def _running(stack: RoutineStack, org: Org) -> int:
    with Session(stack.engine) as session:
        return len(
            session.exec(
                select(ActionCall.id).where(
                    col(ActionCall.org_id) == org.org_id, col(ActionCall.state) == RUNNING
                )
            ).all()
        )


async def test_a_real_429_is_waited_exactly_its_retry_after_with_the_same_key(
    routine_stack: RoutineStack,
) -> None:
    # The sleepers go through an api process whose call overhead is 1 s, so their deadlines (and the
    # Retry-After computed from them) are 6 s away rather than 15. They call an action no other test
    # calls (the priced echo's fail, which runs at least its own 5 s): with no finished calls of it,
    # Retry-After is their soonest deadline, not when such calls usually end (api.calls.limits; other
    # tests' 1 s sleeps of the free echo's fail made it 1 s, and the step waited twice).
    url, proc = routine_stack.start_api(extra_env={"B3OS_CALL_OVERHEAD_S": "1"}, listed=False)
    org = routine_stack.runner()
    sleeper_key = routine_stack.add_key(org)
    try:
        async with loopback.async_client(timeout=30) as client:
            sleepers = await _sleepers(routine_stack, client, sleeper_key, url, 4, f"{PRICEY}/fail@1", 5000)
            soonest = min(c.deadline_at for c in routine_stack.calls_of(org)).timestamp()
            source = f"name: busy\nsteps:\n  - id: echo\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
            run = await routine_stack.run(org, source)
            answers = await asyncio.gather(*sleepers)
    finally:
        proc.stop()

    assert [a.status_code for a in answers] == [504] * 4  # the sleepers were cut at their timeout
    assert run["status"] == "succeeded" and run["steps"]["echo"]["attempts"] == 2, run
    history = await routine_stack.history(run["workflow_id"])
    (scheduled,) = events(history, SCHEDULED)
    (started,) = events(history, STARTED)  # the attempt that succeeded
    assert started.activity_task_started_event_attributes.attempt == 2
    first = failure_details(started)  # what attempt 1 got: the api's 429 and its Retry-After
    assert (first["code"], first["status"], first["attempt"]) == ("concurrency_limited", 429, 1)
    retry_after = first["retry_after"]
    last_failure = started.activity_task_started_event_attributes.last_failure
    assert last_failure.application_failure_info.next_retry_delay.seconds == retry_after
    assert abs(retry_after - (soonest - at(scheduled))) < 1.5  # computed from the sleepers' deadlines
    waited = at(started) - at(scheduled)
    # never before Retry-After (the delay itself is checked above); the task's dispatch after it takes
    # longer on a busy machine (1 s more once), so the bound above is loose
    assert retry_after <= waited < retry_after + 5, (retry_after, waited)
    # both attempts sent the step's one key; the org was charged once for the step
    key = step_idempotency_key(run["workflow_id"], "echo", None)
    assert first["idempotency_key"] == key
    step_calls = [c for c in routine_stack.calls_of(org) if c.key_id == org.key_id]
    assert len(step_calls) == 1 and routine_stack.stored_keys(org) == {key: step_calls[0].id}
    usage = loopback.get(f"{routine_stack.url}/v1/usage", headers=org.headers, timeout=30).json()
    assert [k["calls"] for k in usage["keys"] if k["key_id"] == org.key_id] == [1]


async def test_a_non_retryable_error_stops_the_run_with_its_code_reason_and_message(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    for mode, reason in (("tool_error", "tool_error"), ("bad_output", "output_invalid")):
        source = f"""\
name: refused-{mode.replace("_", "-")}
steps:
  - id: fail
    uses: {FREE_FAIL}
    with: {{mode: {mode}, code: no_way, message: this will never work, retryable: false}}
    retry: {{max-attempts: 5, backoff: 100ms}}
  - id: never
    uses: {FREE_ECHO}
    with: {{text: no}}
"""
        run = await routine_stack.run(org, source)
        assert run["status"] == "failed", run
        error = run["error"]
        assert (error["step"], error["code"], error["reason"]) == ("fail", "tool_failed", reason)
        assert run["steps"]["fail"]["error"]["message"] == error["message"]
        if mode == "tool_error":
            assert "this will never work" in error["message"]
            assert run["steps"]["fail"]["error"]["tool_code"] == "no_way"
        assert run["steps"]["fail"]["attempts"] == 1
        assert run["steps"]["never"]["status"] == "skipped"  # after a failure, as in GitHub Actions
        history = await routine_stack.history(run["workflow_id"])
        (started,) = events(history, STARTED)
        assert started.activity_task_started_event_attributes.attempt == 1  # never retried
    assert len(routine_stack.calls_of(org)) == 2  # one call per run; `never` never called


async def test_a_retryable_tool_error_is_retried_with_the_step_backoff(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = f"""\
name: flaky
steps:
  - id: fail
    uses: {FREE_FAIL}
    with: {{mode: tool_error, code: busy, message: try later, retryable: true}}
    retry: {{max-attempts: 2, backoff: 1500ms}}
"""
    run = await routine_stack.run(org, source)
    assert run["status"] == "failed" and run["steps"]["fail"]["attempts"] == 2, run
    assert (run["error"]["code"], run["steps"]["fail"]["error"]["retryable"]) == ("tool_failed", True)
    history = await routine_stack.history(run["workflow_id"])
    (scheduled,) = events(history, SCHEDULED)
    (started,) = events(history, STARTED)
    assert started.activity_task_started_event_attributes.attempt == 2
    first = failure_details(started)
    assert (first["code"], first["retryable"], first["attempt"]) == ("tool_failed", True, 1)
    assert "retry_after" not in first  # the step's backoff, not a Retry-After
    # The tool asked for a retry, so its answer is not kept under the step's key: the second attempt,
    # with the same key, runs the tool again (a new run, charged on its own), and the run fails
    # after max-attempts. See api/calls/idempotency.py.
    first_call, second_call = routine_stack.calls_of(org)
    policy = scheduled.activity_task_scheduled_event_attributes.retry_policy
    assert policy.initial_interval.ToTimedelta() == timedelta(seconds=1.5)
    ran_s = (first_call.finished_at - first_call.started_at).total_seconds() if first_call.finished_at else 0
    # never before the backoff (asked of Temporal above); the attempt's run and the task's dispatch after
    # it take longer on a busy machine, so the bound above is loose
    waited = at(started) - at(scheduled)
    assert 1.5 <= waited < 1.5 + 2 * ran_s + 5, (waited, ran_s)
    assert first_call.id != second_call.id
    assert first["idempotency_key"] == step_idempotency_key(run["workflow_id"], "fail", None)


async def test_step_timeout_becomes_the_calls_timeout_ms(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = f"""\
name: timed
steps:
  - id: a
    uses: {FREE_ECHO}
    timeout: 1500ms
    with: {{text: x}}
  - id: b
    uses: {FREE_ECHO}
    with: {{text: y}}
"""
    run = await routine_stack.run(org, source)
    assert run["status"] == "succeeded"
    assert [c.timeout_ms for c in routine_stack.calls_of(org)] == [1500, 10000]  # b: the action's own


async def test_a_cancelled_run_kills_its_steps_vm_and_ends_cancelled(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = f"""\
name: cancel
steps:
  - id: slow
    uses: {FAIL_REF}
    with: {{mode: sleep, seconds: 30}}
  - id: never
    uses: {FREE_ECHO}
    with: {{text: no}}
"""
    stored = await routine_stack.store(org, source)
    assert stored.status_code == 201, stored.text
    run_id = await routine_stack.start_run(org, "cancel")
    deadline = time.monotonic() + PATIENCE_S
    while _running(routine_stack, org) < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.to_thread(wait_vm_command, routine_stack, "sleep 30 ")  # the command sleeps in its VM
    mid = await routine_stack.read(org, run_id)
    assert mid["status"] == "running" and mid["steps"]["slow"]["status"] == "running"

    cancelled_at = time.time()
    async with loopback.async_client(base_url=routine_stack.url) as http:
        answer = await http.post(f"/v1/runs/{run_id}/cancel", headers=org.headers)
        assert answer.status_code == 202 and answer.json() == {"run_id": run_id, "status": "cancelling"}
        run = await routine_stack.final(org, run_id)
        assert run["status"] == "cancelled"
        assert (run["steps"]["slow"]["status"], run["steps"]["never"]["status"]) == ("cancelled", "skipped")
        again = await http.post(f"/v1/runs/{run_id}/cancel", headers=org.headers)
        assert again.status_code == 409 and "already ended (cancelled)" in again.json()["error"]["message"]
    history = await routine_stack.history(run["workflow_id"])
    # the step's activity heard of the cancel and stopped: cancelled, neither failed nor timed out
    (cancelled,) = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED)
    assert at(cancelled) > cancelled_at
    assert events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)
    # The activity asked the api to cancel its call: the node killed the VM at once (not at its 5 s timeout).
    deadline = time.monotonic() + PATIENCE_S
    while (calls := routine_stack.calls_of(org))[0].state == RUNNING:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    (call,) = calls
    # killed by the cancel (a signal), not ended by its 5 s timeout (that is tool_timed_out)
    assert (call.code, call.reason, call.ran, call.timeout_ms) == ("tool_failed", "signal", True, 5000)
    assert call.finished_at is not None
    assert call.finished_at.replace(tzinfo=UTC).timestamp() > cancelled_at
    # billed like a failure: compute and the floor, never the publisher's 100 micro-USD
    assert call.price == 0 and call.compute > 0 and call.floor > 0
    assert call.total == call.compute + call.floor
    with Session(routine_stack.engine) as session:
        cancel = session.get(CallCancel, call.id)
    assert cancel is not None and (cancel.node_state, cancel.key_id) == ("killed", org.key_id)


async def test_an_expression_that_fails_at_run_time_fails_its_step_with_the_sentence(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = f"""\
name: badexpr
steps:
  - id: a
    uses: {FREE_ECHO}
    with: {{text: x}}
  - id: b
    uses: {FREE_ECHO}
    with: {{text: "${{{{ steps.a.output.nope }}}}"}}
"""
    run = await routine_stack.run(org, source)
    assert run["status"] == "failed"
    assert (run["error"]["step"], run["error"]["code"], run["error"]["reason"]) == (
        "b",
        "expression_failed",
        "with",
    )
    assert "steps.a.output.nope" in run["error"]["message"]
    assert len(routine_stack.calls_of(org)) == 1  # step b never called


async def test_a_failed_foreach_item_fails_the_step_and_keeps_the_other_items(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = f"""\
name: items
steps:
  - id: each
    uses: {FREE_ECHO}
    foreach: [a, 5, c]
    with: {{text: "${{{{ item }}}}"}}
    continue-on-error: true
outputs:
  status: ${{{{ steps.each.status }}}}
"""
    run = await routine_stack.run(org, source)
    each = run["steps"]["each"]
    assert run["status"] == "succeeded" and run["outputs"] == {"status": "failed"}
    assert each["status"] == "failed"
    assert (each["error"]["code"], each["error"]["message"]) == (
        "invalid_request",
        "input.text: 5 is not of type 'string'",
    )
    assert each["output"] == [{"text": "a"}, None, {"text": "c"}]
