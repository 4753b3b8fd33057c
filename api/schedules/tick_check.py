"""A schedule's run start is honoured only for a tick its own Temporal Schedule started.

The schedule's grant is in its Temporal Schedule's action (anyone who reads Temporal reads it), so a
tick workflow started by hand with that grant would make real, charged runs. The tick's activity
therefore names its workflow (`X-B3OS-Tick`) and Temporal run (`X-B3OS-Run-Execution`), both as
Temporal gave them to it, and the api asks the Temporal Schedule whether it started that execution:
the Schedule's running and recent actions (which only Temporal's scheduler writes) must hold it. The
scheduler writes an action a moment after it starts the tick, so the api asks up to `CHECKS` times,
`CHECK_EVERY_S` apart, before it refuses.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client, ScheduleActionExecutionStartWorkflow
from temporalio.service import RPCError

from api.errors import Forbidden, ServiceUnavailable

TICK_HEADER = "X-B3OS-Tick"
EXECUTION_HEADER = "X-B3OS-Run-Execution"
CHECKS = 4
CHECK_EVERY_S = 0.5


async def check_tick(client: Client, schedule_id: str, temporal_id: str, tick: str, execution: str) -> None:
    """Refuse a run start whose tick (`tick`, Temporal run `execution`) the schedule (`schedule_id`, its
    Temporal Schedule `temporal_id`) did not start.

    Raises:
        Forbidden: reason `tick_not_of_schedule`. ServiceUnavailable: Temporal did not answer.
    """
    handle = client.get_schedule_handle(temporal_id)
    for attempt in range(CHECKS):
        if attempt:
            await asyncio.sleep(CHECK_EVERY_S)
        try:
            info = (await handle.describe()).info
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not describe schedule {schedule_id}: {exc.message}", retry_after_s=5
            ) from exc
        started = [*info.running_actions, *(r.action for r in info.recent_actions)]
        if any(
            isinstance(a, ScheduleActionExecutionStartWorkflow)
            and a.workflow_id == tick
            and a.first_execution_run_id == execution
            for a in started
        ):
            return
    raise Forbidden(
        f"Schedule {schedule_id} did not start the tick that asks for this run ({TICK_HEADER}, "
        f"{EXECUTION_HEADER}): only its own ticks start its runs.",
        reason="tick_not_of_schedule",
    )
