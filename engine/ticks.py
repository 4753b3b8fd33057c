"""What a schedule's Temporal action takes and gives: the models of the `routine-schedule-tick` workflow.

A routine's schedule is a Temporal Schedule (`routine-schedule-<routine>-<schedule id>`) whose action starts a
`routine-schedule-tick` workflow (engine.schedule_workflow) on the routine workers' task queue. The
tick asks the api for an ordinary run (activity `start_scheduled_run`: the worker token and the
schedule's grant, api.schedules.service), then waits until that run has ended (activity
`wait_run_ended`), so the schedule's overlap policy applies to the runs themselves.

Standard library and pydantic only: the workflow sandbox imports this module.
"""

from __future__ import annotations

from pydantic import BaseModel

SCHEDULE_WORKFLOW_TYPE = "routine-schedule-tick"
"""The registered name of the workflow a schedule's action starts."""


def temporal_schedule_id(schedule_id: str, routine: str | None = None) -> str:
    """The Temporal Schedule of a b3os schedule: `routine-schedule-<routine>-<schedule id>`, the routine's
    name first, so that the Temporal UI's Schedules list (which shows a schedule by its id) names the
    routine; `routine-schedule-<schedule id>` without `routine` (schedules made before it, which keep
    theirs: api.schedules.tables.RoutineSchedule.temporal_id)."""
    return f"routine-schedule-{routine}-{schedule_id}" if routine else f"routine-schedule-{schedule_id}"


class ScheduleTickInput(BaseModel):
    """The tick's input, fixed when the schedule is created: the schedule and its grant.

    `grant` is the schedule's grant (api.schedules.service): with the worker token, it lets the tick ask
    the api for a run of this schedule, and nothing else; deleting the schedule revokes it.
    """

    schedule_id: str
    routine: str
    grant: str


class StartScheduledRunInput(BaseModel):
    schedule_id: str
    grant: str


class StartScheduledRunResult(BaseModel):
    run_id: str
    workflow_id: str


class WaitRunEndedInput(BaseModel):
    workflow_id: str


class WaitRunEndedResult(BaseModel):
    status: str


class ScheduleTickResult(BaseModel):
    """The tick's result: the run it started, and how that run ended."""

    run_id: str
    status: str
