"""Run-bound step calls on the session's real stack (tests/realstack.py): a workflow started on Temporal
by anything but the api calls nothing and charges no one, and a run's grant calls nothing once its run
has ended or was cancelled (api.runs.grants)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import time
import uuid
from typing import Any

import httpx
import loopback
import pytest
from calls.calltest import usage
from calls.stack import WORKER_TOKEN, Org
from realstack import ECHO_REF, FAIL_REF, RoutineStack
from temporalio.client import WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from workers import PATIENCE_S

from activities.idempotency import step_idempotency_key
from api.errors import Forbidden
from api.models import utcnow
from api.runs import grants
from engine.routine import Routine
from engine.runs import WORKFLOW_TYPE, RunRoutineInput

STEAL = Routine.model_validate(
    {"name": "steal", "steps": [{"id": "take", "uses": ECHO_REF, "with": {"text": "on your bill"}}]}
)


async def _start_directly(stack: RoutineStack, victim: Org, grant: str | None) -> ApplicationError:
    """Start a routine workflow straight on Temporal for the victim's organization and key; its failure."""
    run_id = f"run_{uuid.uuid4().hex[:20]}"
    handle = await stack.temporal_client.start_workflow(
        WORKFLOW_TYPE,
        RunRoutineInput(
            routine=STEAL, org_id=victim.org_id, key_id=victim.key_id, run_id=run_id, grant=grant
        ),
        id=f"routine-steal-{run_id}",
        task_queue=stack.queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def _grant_of(stack: RoutineStack, workflow_id: str) -> str:
    """The grant the api put in a run's input (as anyone who reads its history sees it)."""
    (first, *_) = await stack.history(workflow_id)
    payloads = first.workflow_execution_started_event_attributes.input.payloads
    (run_input,) = pydantic_data_converter.payload_converter.from_payloads(payloads, [RunRoutineInput])
    assert run_input.grant is not None and run_input.grant.startswith("b3run_")
    return str(run_input.grant)


def _call_with(
    stack: RoutineStack, grant: str, workflow_id: str, step: str, execution: str = ""
) -> httpx.Response:
    """POST /v1/actions/call as the worker does, for `step` of the run of `workflow_id` (its Temporal run
    `execution`)."""
    headers = {
        "Authorization": f"Bearer {WORKER_TOKEN}",
        "X-B3OS-Run-Grant": grant,
        "X-B3OS-Run-Step": step,
        "X-B3OS-Run-Execution": execution,
        "Idempotency-Key": step_idempotency_key(workflow_id, step, None),
    }
    body = {"ref": ECHO_REF, "input": {"text": "after the end"}}
    return loopback.post(f"{stack.url}/v1/actions/call", headers=headers, json=body, timeout=30)


@pytest.mark.parametrize("grant", [None, "b3run_" + "forged" * 7], ids=["no grant", "forged grant"])
async def test_a_workflow_started_on_temporal_directly_charges_no_one(
    routine_stack: RoutineStack, grant: str | None
) -> None:
    victim = routine_stack.runner()
    cause = await _start_directly(routine_stack, victim, grant)
    assert cause.type == "StepFailed"
    expected = (
        "step take failed: unauthorized: The worker token alone calls nothing"
        if grant is None
        else "step take failed: unauthorized: X-B3OS-Run-Grant is not the grant of any run this api started"
    )
    assert cause.message.startswith(expected), cause.message
    assert "POST /v1/routines/{name}/runs" in cause.message
    assert routine_stack.calls_of(victim) == []
    assert usage(routine_stack, victim)["calls"] == 0


async def test_a_grant_read_from_a_running_runs_history_calls_nothing_for_another_workflow(
    routine_stack: RoutineStack,
) -> None:
    victim = routine_stack.runner()
    source = (
        f"name: slow\nsteps:\n  - id: wait\n    uses: {FAIL_REF}\n    with: {{mode: sleep, seconds: 3}}\n"
    )
    stored = await routine_stack.store(victim, source)
    assert stored.status_code == 201, stored.text
    run_id = await routine_stack.start_run(victim, "slow")
    run = await routine_stack.read(victim, run_id)
    grant = await _grant_of(routine_stack, run["workflow_id"])
    cause = await _start_directly(routine_stack, victim, grant)
    assert cause.message.startswith(
        "step take failed: forbidden (execution_not_of_run): This call does not come from the workflow "
        "execution the api started"
    ), cause.message
    final = await routine_stack.final(victim, run_id)
    assert final["status"] == "succeeded"
    (call,) = routine_stack.calls_of(victim)  # the run's own step, and nothing else
    assert routine_stack.stored_keys(victim) == {
        step_idempotency_key(run["workflow_id"], "wait", None): call.id
    }


async def _started_calling(stack: RoutineStack, org: Org, source: str, name: str) -> str:
    """Store the routine, start a run of it and wait until its first call has started: the run's id."""
    stored = await stack.store(org, source)
    assert stored.status_code == 201, stored.text
    run_id = await stack.start_run(org, name)
    deadline = time.monotonic() + PATIENCE_S
    while not stack.calls_of(org):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    return run_id


async def _cancel(stack: RoutineStack, org: Org, run_id: str) -> None:
    async with loopback.async_client(base_url=stack.url) as http:
        answer = await http.post(f"/v1/runs/{run_id}/cancel", headers=org.headers)
    assert answer.status_code == 202, answer.text


async def test_the_grant_of_a_finished_run_calls_nothing(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = f"name: once\nsteps:\n  - id: a\n    uses: {ECHO_REF}\n    with: {{text: hi}}\n"
    run = await routine_stack.run(org, source)
    assert run["status"] == "succeeded"
    grant = await _grant_of(routine_stack, run["workflow_id"])
    refused = await asyncio.to_thread(_call_with, routine_stack, grant, run["workflow_id"], "b")
    assert refused.status_code == 403, refused.text
    error: dict[str, Any] = refused.json()["error"]
    assert (error["code"], error["reason"]) == ("forbidden", "run_ended")
    assert error["message"] == f"Run {run['run_id']} has ended: its grant calls nothing more."
    assert len(routine_stack.calls_of(org)) == 1


async def test_the_grant_of_a_cancelled_run_starts_no_call(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    source = (
        f"name: stopped\nsteps:\n  - id: wait\n    uses: {FAIL_REF}\n    with: {{mode: sleep, seconds: 30}}\n"
    )
    run_id = await _started_calling(routine_stack, org, source, "stopped")
    workflow_id = (await routine_stack.read(org, run_id))["workflow_id"]
    grant = await _grant_of(routine_stack, workflow_id)
    execution = (await routine_stack.temporal_client.get_workflow_handle(workflow_id).describe()).run_id
    await _cancel(routine_stack, org, run_id)
    refused = await asyncio.to_thread(_call_with, routine_stack, grant, workflow_id, "wait", execution)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["reason"] in ("run_cancelled", "run_ended")
    run = await routine_stack.final(org, run_id)
    assert run["status"] == "cancelled"
    refused = await asyncio.to_thread(_call_with, routine_stack, grant, workflow_id, "wait", execution)
    assert refused.json()["error"]["reason"] == "run_ended"
    # the step's call was cancelled by its activity, under the grant
    deadline = time.monotonic() + PATIENCE_S
    while (call := routine_stack.calls_of(org)[0]).finished_at is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert len(routine_stack.calls_of(org)) == 1
    assert (call.code, call.reason) == ("tool_failed", "signal")


async def test_a_cancelled_runs_cleanup_steps_still_call_and_its_other_steps_do_not(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = f"""name: cleanup
steps:
  - id: wait
    uses: {FAIL_REF}
    with: {{mode: sleep, seconds: 30}}
  - id: next
    uses: {ECHO_REF}
    with: {{text: never}}
  - id: tidy
    needs: [wait]
    if: ${{{{ always() }}}}
    uses: {ECHO_REF}
    with: {{text: tidied}}
  - id: report
    needs: [tidy]
    if: ${{{{ cancelled() && steps.tidy.status == 'succeeded' }}}}
    uses: {ECHO_REF}
    with: {{text: "${{{{ steps.tidy.output.text }}}} after a cancel"}}
"""
    run_id = await _started_calling(routine_stack, org, source, "cleanup")
    await _cancel(routine_stack, org, run_id)
    run = await routine_stack.final(org, run_id)
    assert run["status"] == "cancelled"
    steps = run["steps"]
    assert steps["wait"]["status"] == "cancelled"
    assert steps["next"]["status"] in ("pending", "skipped")  # never called: not a cleanup step
    assert steps["tidy"]["status"] == "succeeded", steps["tidy"]
    assert steps["report"]["status"] == "succeeded", steps["report"]
    assert steps["report"]["output"] == {"text": "tidied after a cancel"}
    calls = routine_stack.calls_of(org)
    assert len(calls) == 3  # wait (cancelled), tidy and report


def test_a_cleanup_step_calls_within_its_time_after_the_cancel_and_no_other_step_does() -> None:
    now = utcnow()
    grant = grants.FoundGrant(
        run_id="run_x",
        workflow_id="routine-x",
        key_id="key_x",
        expires_at=now + dt.timedelta(hours=1),
        cancelled_at=now - dt.timedelta(minutes=1),
        ended_at=None,
        cleanup_steps=["tidy"],
        key=None,  # type: ignore[arg-type]  # check reads nothing of the key
    )
    key = step_idempotency_key("routine-x", "tidy", None)
    assert grants.check(grant, step="tidy", idempotency_key=key, cancelling=False, execution="") == (
        grants.StepCall(key=key, ref=None)
    )
    other = step_idempotency_key("routine-x", "next", None)
    with pytest.raises(Forbidden) as refused:
        grants.check(grant, step="next", idempotency_key=other, cancelling=False, execution="")
    assert refused.value.body()["error"]["reason"] == "run_cancelled"
    late = dataclasses.replace(grant, cancelled_at=now - grants.CLEANUP_TIME - dt.timedelta(seconds=1))
    with pytest.raises(Forbidden) as refused:
        grants.check(late, step="tidy", idempotency_key=key, cancelling=False, execution="")
    assert "cancelled more than 5 minutes ago: its cleanup step tidy starts no new call" in str(refused.value)


def _bound_grant() -> grants.FoundGrant:
    return grants.FoundGrant(
        run_id="run_x",
        workflow_id="routine-x",
        key_id="key_x",
        expires_at=utcnow() + dt.timedelta(hours=1),
        cancelled_at=None,
        ended_at=None,
        cleanup_steps=[],
        key=None,  # type: ignore[arg-type]  # check reads nothing of the key
        steps={"one": {"ref": ECHO_REF, "foreach": False}, "each": {"ref": FAIL_REF, "foreach": True}},
        execution_id="exec-1",
    )


@pytest.mark.parametrize(
    ("step", "execution", "reason", "says"),
    [
        ("notinrun", "exec-1", "step_unknown", "has no step 'notinrun' in its routine version"),
        ("one/5", "exec-1", "step_unknown", "Step one of run run_x has no foreach items"),
        ("each", "exec-1", "step_unknown", "has foreach items: its calls name an index"),
        ("each/999999", "exec-1", "step_unknown", "an index below 10,000"),
        ("one", "exec-2", "execution_not_of_run", "not come from the workflow execution"),
        ("one", "", "execution_not_of_run", "its grant serves that execution only"),
    ],
    ids=["a step not in the routine", "an index on a step without foreach", "no index on a foreach step",
         "an index past the most items", "another execution", "no execution"],
)  # fmt: skip
def test_a_grant_calls_for_its_own_runs_steps_from_its_own_execution_only(
    step: str, execution: str, reason: str, says: str
) -> None:
    step_id, _, index = step.partition("/")
    key = step_idempotency_key("routine-x", step_id, int(index) if index else None)
    with pytest.raises(Forbidden) as refused:
        grants.check(_bound_grant(), step=step, idempotency_key=key, cancelling=False, execution=execution)
    error = refused.value.body()["error"]
    assert error["reason"] == reason and says in error["message"], error


def test_a_grant_names_the_ref_its_step_pinned() -> None:
    key = step_idempotency_key("routine-x", "each", 3)
    call = grants.check(
        _bound_grant(), step="each/3", idempotency_key=key, cancelling=False, execution="exec-1"
    )
    assert call == grants.StepCall(key=key, ref=FAIL_REF)


async def _in_flight(stack: RoutineStack, org: Org) -> tuple[str, str]:
    """A run of a step that sleeps 3 s, its call started: its run id and workflow id."""
    source = (
        f"name: slow\nsteps:\n  - id: wait\n    uses: {FAIL_REF}\n    with: {{mode: sleep, seconds: 3}}\n"
    )
    run_id = await _started_calling(stack, org, source, "slow")
    return run_id, (await stack.read(org, run_id))["workflow_id"]


async def test_a_grant_read_from_history_calls_nothing_for_a_workflow_started_again_under_its_id(
    routine_stack: RoutineStack,
) -> None:
    victim = routine_stack.runner()
    run_id, workflow_id = await _in_flight(routine_stack, victim)
    grant = await _grant_of(routine_stack, workflow_id)
    await routine_stack.temporal_client.get_workflow_handle(workflow_id).terminate("stolen")
    # the same workflow id, the stolen grant, a step of the forger's choosing under the run's step id
    forged = Routine.model_validate(
        {"name": "slow", "steps": [{"id": "wait", "uses": ECHO_REF, "with": {"text": "on your bill"}}]}
    )
    handle = await routine_stack.temporal_client.start_workflow(
        WORKFLOW_TYPE,
        RunRoutineInput(
            routine=forged, org_id=victim.org_id, key_id=victim.key_id, run_id=run_id, grant=grant
        ),
        id=workflow_id,
        task_queue=routine_stack.queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.message.startswith(
        "step wait failed: forbidden (execution_not_of_run): This call does not come from the workflow "
        f"execution the api started for run {run_id}"
    ), cause.message
    (call,) = routine_stack.calls_of(victim)  # the run's own step, and nothing else
    assert call.action == "fail"


async def test_a_live_grant_calls_nothing_for_steps_refs_or_executions_not_its_runs(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    run_id, workflow_id = await _in_flight(routine_stack, org)
    grant = await _grant_of(routine_stack, workflow_id)
    execution = (await routine_stack.temporal_client.get_workflow_handle(workflow_id).describe()).run_id
    tries = [  # step, ref, execution: each refused, and why
        ("notinrun", ECHO_REF, execution, "step_unknown"),
        ("wait/5", FAIL_REF, execution, "step_unknown"),
        ("wait", ECHO_REF, execution, "ref_not_of_step"),
        ("wait", FAIL_REF, "another-execution", "execution_not_of_run"),
    ]
    for step, ref, run_execution, reason in tries:
        step_id, _, index = step.partition("/")
        headers = {
            "Authorization": f"Bearer {WORKER_TOKEN}",
            grants.GRANT_HEADER: grant,
            grants.STEP_HEADER: step,
            grants.EXECUTION_HEADER: run_execution,
            "Idempotency-Key": step_idempotency_key(workflow_id, step_id, int(index) if index else None),
        }
        body = {"ref": ref, "input": {"mode": "sleep", "seconds": 0} if ref == FAIL_REF else {"text": "x"}}
        refused = await asyncio.to_thread(
            loopback.post, f"{routine_stack.url}/v1/actions/call", headers=headers, json=body, timeout=30
        )
        assert refused.status_code == 403, (step, refused.text)
        assert refused.json()["error"]["reason"] == reason, (step, refused.text)
    assert (await routine_stack.final(org, run_id))["status"] == "succeeded"
    assert len(routine_stack.calls_of(org)) == 1  # the run's own step, and nothing else


@pytest.mark.parametrize(
    ("step", "chunk", "refused"),
    [
        ("each/3", "routine-x/foreach/each/0", False),
        ("each/2500", "routine-x/foreach/each/2", False),
        ("each/3", "routine-x/foreach/other/0", True),
        ("one", "routine-x/foreach/one/0", True),
        ("each/3", "routine-y/foreach/each/0", True),
        ("each/3", "routine-x/foreach/each/zero", True),
    ],
    ids=["its chunk", "a later chunk", "another step's", "a step without foreach", "another run's",
         "no chunk number"],
)  # fmt: skip
def test_a_foreach_chunks_call_counts_as_its_runs_when_its_id_is_one_of_that_steps_chunks(
    step: str, chunk: str, refused: bool
) -> None:
    """`chunk` is the child workflow Temporal said is a child of the run's execution (api.runs.links)."""
    step_id, _, index = step.partition("/")
    key = step_idempotency_key("routine-x", step_id, int(index) if index else None)
    check = functools.partial(
        grants.check, _bound_grant(), step=step, idempotency_key=key, cancelling=False, execution="exec-1"
    )
    if not refused:
        assert check(chunk=chunk).key == key
        return
    with pytest.raises(Forbidden) as caught:
        check(chunk=chunk)
    assert caught.value.body()["error"]["reason"] == "execution_not_of_run"
