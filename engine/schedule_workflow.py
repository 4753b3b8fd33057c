"""`ScheduleTickWorkflow`, registered as "routine-schedule-tick": what a routine's schedule starts.

Deterministic code only (the Temporal sandbox re-imports this module). It asks the api for an
ordinary run of the schedule's routine (activity `start_scheduled_run`, retried on 429 and 503 after
their Retry-After; a refusal, such as inputs that no longer fit, fails the tick with the api's
sentence, which the Temporal UI shows under the schedule's recent actions), then waits until that run
has ended (activity `wait_run_ended`), so that the schedule's overlap policy (skip, buffer_one,
allow_all) applies to the runs.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from engine.ticks import (
        SCHEDULE_WORKFLOW_TYPE,
        ScheduleTickInput,
        ScheduleTickResult,
        StartScheduledRunInput,
        StartScheduledRunResult,
        WaitRunEndedInput,
        WaitRunEndedResult,
    )

START_TIMEOUT = timedelta(seconds=60)
WAIT_TIMEOUT = timedelta(
    days=7
)  # longer than any run (B3OS_RUN_TIMEOUT_S); the heartbeat finds a dead worker
WAIT_HEARTBEAT = timedelta(seconds=30)


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE)
class ScheduleTickWorkflow:
    """One firing of a routine's schedule: an ordinary run, started by the api, followed to its end."""

    @workflow.run
    async def run(self, input: ScheduleTickInput) -> ScheduleTickResult:
        started = await workflow.execute_activity(
            "start_scheduled_run",
            StartScheduledRunInput(schedule_id=input.schedule_id, grant=input.grant),
            result_type=StartScheduledRunResult,
            start_to_close_timeout=START_TIMEOUT,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=60), maximum_attempts=50),
            summary=f"start a run of {input.routine}",
        )
        ended = await workflow.execute_activity(
            "wait_run_ended",
            WaitRunEndedInput(workflow_id=started.workflow_id),
            result_type=WaitRunEndedResult,
            start_to_close_timeout=WAIT_TIMEOUT,
            heartbeat_timeout=WAIT_HEARTBEAT,
            summary=f"wait for run {started.run_id}",
        )
        return ScheduleTickResult(run_id=started.run_id, status=ended.status)
