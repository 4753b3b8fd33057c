"""Cron expressions (engine.cron) are checked by the rules of Temporal's own parser: each expression here is
given to the session's real Temporal server too, and the two must agree."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Schedule, ScheduleActionStartWorkflow, ScheduleSpec
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from engine.cron import ScheduleError, check_cron

REFUSED = {
    "59-0 * * * *": "the minute field '59-0' has the range 59-0, which ends before it starts: write it as "
    "two, 59-59,0-0",
    "0 23-1 * * *": "the hour field '23-1' has the range 23-1, which ends before it starts: write it as two, "
    "23-23,0-1",
    "0 0 * * sat-sun": "the day of week field 'sat-sun' has the range sat-sun, which ends before it starts: "
    "write it as two, 6-7,0-0",
    "0 0 * dec-jan *": "the month field 'dec-jan' has the range dec-jan, which ends before it starts: write "
    "it as two, 12-12,1-1",
    "*/99999999999999999999 * * * *": "the minute field '*/99999999999999999999' has a step of "
    "99999999999999999999: a step is 1 to 60",
    "*/2147483648 * * * *": "the minute field '*/2147483648' has a step of 2147483648: a step is 1 to 60",
    "*/0 * * * *": "the minute field '*/0' has a step of 0: a step is 1 to 60",
    "0 24 * * *": "the hour field '24' has 24, outside 0-23",
}
TAKEN = [
    "*/60 * * * *",
    "1/5 * * * *",
    "0 0 * * 5-7",
    "0 0 * * SUN-SAT",
    "5-5 * * * *",
    "0 9-17/2 * * mon-fri",
]


@pytest.mark.parametrize(("cron", "why"), REFUSED.items())
async def test_a_cron_temporal_refuses_is_refused_with_its_field_and_why(
    temporal_env: WorkflowEnvironment, cron: str, why: str
) -> None:
    with pytest.raises(ScheduleError) as refused:
        check_cron(cron)
    assert refused.value.message == f"cron {cron!r}: {why}"
    assert await _temporal_refuses(temporal_env, cron)


@pytest.mark.parametrize("cron", TAKEN)
async def test_a_cron_temporal_takes_is_taken(temporal_env: WorkflowEnvironment, cron: str) -> None:
    assert check_cron(cron) == cron
    assert not await _temporal_refuses(temporal_env, cron)


async def _temporal_refuses(env: WorkflowEnvironment, cron: str) -> bool:
    schedule_id = f"cron-check-{uuid.uuid4().hex[:12]}"
    action = ScheduleActionStartWorkflow("never", id=schedule_id, task_queue="cron-check-nobody")
    try:
        handle = await env.client.create_schedule(
            schedule_id, Schedule(action=action, spec=ScheduleSpec(cron_expressions=[cron]))
        )
    except RPCError as exc:
        assert exc.status == RPCStatusCode.INVALID_ARGUMENT, exc
        return True
    await handle.delete()
    return False
