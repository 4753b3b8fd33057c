"""Schedules on the real stack (tests/realstack.py): Temporal Schedules created, listed, triggered (an
ordinary run, started by the api for the schedule's grant), paused, deleted; a routine file's `on:
schedule` applied when it is stored; refusals that name the field; organizations fenced."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import loopback
from realstack import FREE_ECHO, RUNNER_SCOPES, RoutineStack
from sqlmodel import Session
from temporalio.client import ScheduleActionStartWorkflow

from api.schedules.service import TICK_PRIORITY
from api.schedules.tables import RoutineSchedule
from engine.ticks import temporal_schedule_id

GREET = f"""\
name: greet
inputs:
  who: {{type: string}}
steps:
  - id: say
    uses: {FREE_ECHO}
    with: {{text: "hello ${{{{ inputs.who }}}}"}}
outputs:
  text: ${{{{ steps.say.output.text }}}}
"""

DECLARED = GREET.replace(
    "steps:\n",
    'on:\n  schedule:\n    - cron: "0 7 * * 1-5"\n      timezone: Europe/Paris\n      inputs: {who: team}\n'
    '    - cron: "*/30 * * * *"\n      inputs: {who: ops}\n      overlap: buffer_one\nsteps:\n',
)


def _call(
    stack: RoutineStack, method: str, path: str, headers: dict[str, str], body: Any = None
) -> httpx.Response:
    return loopback.request(method, f"{stack.url}{path}", headers=headers, json=body, timeout=30)


def temporal_schedules(stack: RoutineStack) -> str:
    """`temporal schedule list` of the stack's Temporal, as an operator runs it."""
    binary = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    done = subprocess.run(
        [binary, "schedule", "list", "--address", stack.temporal, "--namespace", stack.namespace],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _runs_of(
    stack: RoutineStack, headers: dict[str, str], routine: str, count: int
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        runs: list[dict[str, Any]] = _call(stack, "GET", f"/v1/runs?routine={routine}", headers).json()[
            "runs"
        ]
        if len(runs) >= count:
            return runs
        assert time.monotonic() < deadline, f"no scheduled run of {routine} started"
        await asyncio.sleep(0.2)


async def _ended_ticks(stack: RoutineStack, sid: str, count: int) -> list[Any]:
    query = (
        f"B3osSchedule = '{sid}' AND WorkflowType = 'routine-schedule-tick' AND ExecutionStatus = 'Completed'"
    )
    deadline = time.monotonic() + 60
    while True:
        found = [w async for w in stack.temporal_client.list_workflows(query)]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"no tick of {sid} ended"
        await asyncio.sleep(0.2)


async def test_a_schedule_is_created_listed_triggered_paused_and_deleted(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    body = {"cron": "0 7 * * 1-5", "timezone": "Europe/Paris", "inputs": {"who": "ann"}}
    made = _call(routine_stack, "POST", "/v1/routines/greet/schedules", org.headers, body)
    assert made.status_code == 201, made.text
    schedule = made.json()
    sid = schedule["id"]
    assert (schedule["cron"], schedule["timezone"], schedule["overlap"], schedule["paused"]) == (
        "0 7 * * 1-5",
        "Europe/Paris",
        "skip",
        False,
    )
    # the Temporal UI's Schedules list shows a schedule by its id: it names the routine
    assert schedule["temporal_schedule_id"] == f"routine-schedule-greet-{sid}" and schedule["next_runs"]
    listed = _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"]
    assert [s["id"] for s in listed] == [sid]
    assert temporal_schedule_id(sid, "greet") in temporal_schedules(routine_stack)

    triggered = _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/trigger", org.headers)
    assert triggered.status_code == 202, triggered.text
    (summary,) = await _runs_of(routine_stack, org.headers, "greet", 1)
    assert (summary["schedule_id"], summary["rerun_of"]) == (sid, None)  # the list says it too
    run = await routine_stack.final(org, summary["run_id"])
    assert run["status"] == "succeeded" and run["outputs"] == {"text": "hello ann"}
    assert run["schedule_id"] == sid and run["inputs"] == {"who": "ann"}
    assert {c.key_id for c in routine_stack.calls_of(org)} == {org.key_id}  # an ordinary run of that key

    # the tick ends once its run has ended (so overlap policies apply to runs); a schedule's workflow ids
    # are its id and the second it fired, so two triggers need distinct seconds
    ticks = await _ended_ticks(routine_stack, sid, 1)
    assert ticks[0].id.startswith(f"routine-tick-{sid}-")

    paused = _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/pause", org.headers)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    handle = routine_stack.temporal_client.get_schedule_handle(temporal_schedule_id(sid, "greet"))
    described = (await handle.describe()).schedule
    assert described.state.paused is True
    assert described.spec.jitter == dt.timedelta(seconds=30)  # the schedules of one minute are spread
    assert isinstance(described.action, ScheduleActionStartWorkflow)
    assert described.action.priority.priority_key == TICK_PRIORITY  # ticks come after others' runs
    assert (
        _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/trigger", org.headers).status_code
        == 202
    )
    second = (await _runs_of(routine_stack, org.headers, "greet", 2))[0]  # a trigger runs even while paused
    assert (await routine_stack.final(org, second["run_id"]))["schedule_id"] == sid
    unpaused = _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/unpause", org.headers)
    assert unpaused.json()["paused"] is False

    other = routine_stack.org(scopes=RUNNER_SCOPES)
    for method, path in (
        ("GET", "/v1/routines/greet/schedules"),
        ("POST", f"/v1/routines/greet/schedules/{sid}/trigger"),
        ("DELETE", f"/v1/routines/greet/schedules/{sid}"),
    ):
        assert _call(routine_stack, method, path, other.headers).status_code == 404, path

    deleted = _call(routine_stack, "DELETE", f"/v1/routines/greet/schedules/{sid}", org.headers)
    assert deleted.status_code == 204, deleted.text
    assert _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"] == []
    assert temporal_schedule_id(sid, "greet") not in temporal_schedules(routine_stack)
    again = _call(routine_stack, "DELETE", f"/v1/routines/greet/schedules/{sid}", org.headers)
    assert again.status_code == 404


async def test_schedules_that_do_not_fit_are_refused_naming_the_field(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    cases = [
        ({"cron": "0 7 * *", "inputs": {"who": "a"}}, "cron", "cron '0 7 * *' has 4 field(s); it needs 5"),
        (
            {"cron": "61 * * * *", "inputs": {"who": "a"}},
            "cron",
            "the minute field '61' has 61, outside 0-59",
        ),
        (
            {"cron": "0 7 * * *", "timezone": "Mars/Olympus", "inputs": {"who": "a"}},
            "timezone",
            "timezone 'Mars/Olympus' is not an IANA timezone",
        ),
        ({"cron": "0 7 * * *", "inputs": {"who": "a"}, "overlap": "never"}, "overlap", "overlap"),
        ({"cron": "0 7 * * *"}, "inputs", "input 'who' is required"),
    ]
    for body, field, sentence in cases:
        answer = _call(routine_stack, "POST", "/v1/routines/greet/schedules", org.headers, body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["field"] == field and sentence in error["message"], error
    assert _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"] == []
    missing = _call(routine_stack, "POST", "/v1/routines/nope/schedules", org.headers, {"cron": "0 7 * * *"})
    assert missing.status_code == 404


async def test_on_schedule_is_applied_when_the_routine_is_stored(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    mine = _call(
        routine_stack,
        "POST",
        "/v1/routines/greet/schedules",
        org.headers,
        {"cron": "0 0 1 1 *", "inputs": {"who": "me"}},
    )
    assert mine.status_code == 201, mine.text
    stored = await routine_stack.store(org, DECLARED)
    assert stored.status_code == 201, stored.text
    listed = _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"]
    shown = [(s["cron"], s["timezone"], s["inputs"], s["overlap"], s["declared"]) for s in listed]
    assert shown == [
        ("0 0 1 1 *", "UTC", {"who": "me"}, "skip", False),
        ("0 7 * * 1-5", "Europe/Paris", {"who": "team"}, "skip", True),
        ("*/30 * * * *", "UTC", {"who": "ops"}, "buffer_one", True),
    ]
    in_temporal = temporal_schedules(routine_stack)
    assert all(temporal_schedule_id(s["id"], "greet") in in_temporal for s in listed)
    stored = await routine_stack.store(
        org,
        DECLARED.replace(
            '    - cron: "*/30 * * * *"\n      inputs: {who: ops}\n      overlap: buffer_one\n', ""
        ),
    )
    assert stored.status_code == 201, stored.text
    now = _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"]
    assert [(s["cron"], s["declared"]) for s in now] == [("0 0 1 1 *", False), ("0 7 * * 1-5", True)]
    assert temporal_schedule_id(listed[2]["id"], "greet") not in temporal_schedules(routine_stack)
    bad = await routine_stack.store(org, DECLARED.replace("Europe/Paris", "Europe/Atlantis"))
    assert bad.status_code == 400
    assert "on.schedule[0].timezone 'Europe/Atlantis' is not an IANA timezone" in bad.text


async def test_b3os_routine_schedule_and_schedules(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=routine_stack.url, B3OS_API_KEY=org.key)

    def b3os(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cli.main", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    made = b3os(
        "routine", "schedule", "greet", "--cron", "15 6 * * *", "--timezone", "Europe/Paris", "-i", "who=cy"
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("schedule sch_") and "15 6 * * * (Europe/Paris)" in made.stdout
    listed = b3os("routine", "schedules", "greet")
    assert listed.returncode == 0, listed.stderr
    assert "15 6 * * *" in listed.stdout and "active" in listed.stdout and '{"who": "cy"}' in listed.stdout
    bad = b3os("routine", "schedule", "greet", "--cron", "15 6 * *", "-i", "who=cy")
    assert bad.returncode == 1 and "cron '15 6 * *' has 4 field(s)" in bad.stderr


async def test_a_tick_started_by_hand_with_the_schedules_grant_starts_no_run(
    routine_stack: RoutineStack,
) -> None:
    from temporalio.client import WorkflowFailureError
    from temporalio.contrib.pydantic import pydantic_data_converter

    from engine.ticks import SCHEDULE_WORKFLOW_TYPE, ScheduleTickInput

    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    body = {"cron": "0 7 1 1 *", "inputs": {"who": "nobody"}}
    made = _call(routine_stack, "POST", "/v1/routines/greet/schedules", org.headers, body)
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    # the grant, as anyone who reads the Temporal Schedule's action reads it
    action = (
        await routine_stack.temporal_client.get_schedule_handle(temporal_schedule_id(sid, "greet")).describe()
    ).schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    (tick,) = pydantic_data_converter.payload_converter.from_payloads(list(action.args), [ScheduleTickInput])
    assert tick.grant.startswith("b3sch_")
    forged = await routine_stack.temporal_client.start_workflow(
        SCHEDULE_WORKFLOW_TYPE, tick, id=f"routine-tick-{sid}-by-hand", task_queue=routine_stack.queue
    )
    try:
        await forged.result()
        raise AssertionError("a tick started by hand started a run")
    except WorkflowFailureError as failed:
        said = (
            f"{failed.cause} {getattr(failed.cause, 'cause', '')}"  # the activity's failure, then the api's
        )
        assert "tick_not_of_schedule" in said and "did not start the tick" in said, said
    assert _call(routine_stack, "GET", "/v1/runs?routine=greet", org.headers).json()["runs"] == []
    # the schedule's own tick (a trigger) still starts its run
    assert (
        _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/trigger", org.headers).status_code
        == 202
    )
    assert len(await _runs_of(routine_stack, org.headers, "greet", 1)) == 1


async def test_a_schedule_made_before_its_id_named_the_routine_keeps_working(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, GREET)).status_code == 201
    body = {"cron": "0 7 1 1 *", "inputs": {"who": "old"}}
    made = _call(routine_stack, "POST", "/v1/routines/greet/schedules", org.headers, body)
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    # as a schedule made before revision 0012 is: its Temporal Schedule at routine-schedule-<id>, no
    # temporal_id in its row
    client = routine_stack.temporal_client
    new = client.get_schedule_handle(temporal_schedule_id(sid, "greet"))
    await client.create_schedule(temporal_schedule_id(sid), (await new.describe()).schedule)
    await new.delete()
    with Session(routine_stack.engine) as session:
        row = session.get(RoutineSchedule, sid)
        assert row is not None
        row.temporal_id = None
        session.add(row)
        session.commit()

    listed = _call(routine_stack, "GET", "/v1/routines/greet/schedules", org.headers).json()["schedules"]
    assert [(s["temporal_schedule_id"], bool(s["next_runs"])) for s in listed] == [
        (f"routine-schedule-{sid}", True)
    ]
    paused = _call(routine_stack, "POST", f"/v1/routines/greet/schedules/{sid}/pause", org.headers)
    assert paused.status_code == 200, paused.text
    assert (await client.get_schedule_handle(temporal_schedule_id(sid)).describe()).schedule.state.paused
    deleted = _call(routine_stack, "DELETE", f"/v1/routines/greet/schedules/{sid}", org.headers)
    assert deleted.status_code == 204, deleted.text
    assert temporal_schedule_id(sid) not in temporal_schedules(routine_stack)
