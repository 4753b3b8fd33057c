"""The busy lane (api.runs.lanes): an organization's runs past three in flight start on a task queue that
worker processes of their own poll, and only while one does. A real api process, Temporal dev server and
worker processes (tests/realstack.py)."""

from __future__ import annotations

import asyncio
import uuid

import loopback
from realstack import FREE_ECHO, FREE_FAIL, RoutineStack, no_traceback
from temporalio.client import ScheduleActionStartWorkflow
from temporalio.testing import WorkflowEnvironment

from api.runs.lanes import Lanes

# in flight for seconds, so that each start counts the ones before it however slow the machine
SLEEPY = f"name: sleepy\nsteps:\n  - id: s\n    uses: {FREE_FAIL}\n    with: {{mode: sleep, seconds: 3}}\n"
FAST = f"name: fast\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
YEARLY = (
    "name: yearly\non:\n  schedule:\n    - cron: '0 0 1 1 *'\n"
    f"steps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
)


async def _queue(stack: RoutineStack, workflow_id: str) -> str:
    return (await stack.temporal_client.get_workflow_handle(workflow_id).describe()).task_queue


async def test_an_organizations_runs_past_three_in_flight_take_the_busy_lane_that_a_worker_polls(
    routine_stack: RoutineStack,
) -> None:
    busy = f"{routine_stack.queue}-lane-{uuid.uuid4().hex[:6]}"
    # the busy lane's steps wait in this api for a slot the first four free (the api's default wait), not
    # for a Retry-After of the sleepers' deadlines (15 s: their action had no finished call to go by)
    url, api = routine_stack.start_api(
        extra_env={"B3OS_TEMPORAL_BUSY_TASK_QUEUE": busy, "B3OS_ROUTINE_ADMISSION_WAIT_S": "5"}, listed=False
    )
    worker = routine_stack.start_worker(queue=busy, name="busy-worker", nice=10, api_url=url)
    try:
        org, quiet = routine_stack.runner(), routine_stack.runner()
        assert (await routine_stack.store(org, SLEEPY, url=url)).status_code == 201
        assert (await routine_stack.store(quiet, FAST, url=url)).status_code == 201
        ids = [await routine_stack.start_run(org, "sleepy", url=url) for _ in range(6)]
        quiet_id = await routine_stack.start_run(quiet, "fast", url=url)
        runs = await asyncio.gather(*(routine_stack.final(org, i, url=url) for i in ids))
        assert [r["status"] for r in runs] == ["succeeded"] * 6  # the busy lane's worker ran its runs
        queues = [await _queue(routine_stack, r["workflow_id"]) for r in runs]
        # 0-3 in flight: the main lane; the 5th and 6th started with 4 and 5 of theirs in flight
        assert queues == [routine_stack.queue] * 4 + [busy] * 2
        quiet_run = await routine_stack.final(quiet, quiet_id, url=url)
        assert quiet_run["status"] == "succeeded"
        assert await _queue(routine_stack, quiet_run["workflow_id"]) == routine_stack.queue
        # a schedule's ticks only ask for runs: they take the busy lane too
        assert (await routine_stack.store(quiet, YEARLY, url=url)).status_code == 201
        listed = loopback.get(f"{url}/v1/routines/yearly/schedules", headers=quiet.headers, timeout=30)
        (schedule,) = listed.json()["schedules"]
        handle = routine_stack.temporal_client.get_schedule_handle(schedule["temporal_schedule_id"])
        action = (await handle.describe()).schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow) and action.task_queue == busy
    finally:
        api.stop()
        worker.stop()
    no_traceback([worker])


async def test_a_busy_lane_that_no_worker_polls_is_not_used(temporal_env: WorkflowEnvironment) -> None:
    lanes = Lanes("main", f"nobody-polls-{uuid.uuid4().hex[:6]}")
    assert await lanes.queue(temporal_env.client, 5) == "main"  # its runs would wait for good
    assert await Lanes("main", "").queue(temporal_env.client, 5) == "main"  # no busy lane set
