"""Request and answer bodies of the routines and runs API."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.runs import StepResult

_FORBID = ConfigDict(extra="forbid")


class RoutineCreate(BaseModel):
    """A routine to store: its YAML text."""

    model_config = _FORBID
    yaml: str = Field(
        min_length=1,
        max_length=512 * 1024,
        description="the routine file's text",
        examples=[
            "name: greet\ninputs:\n  name: {type: string, default: world}\nsteps:\n  - id: greet\n"
            "    uses: com.example.tools/echo/echo@1\n    with:\n      text: hello ${{ inputs.name }}\n"
            "outputs:\n  greeting: ${{ steps.greet.output.text }}\n"
        ],
    )


class RoutinePublic(BaseModel):
    """A stored routine."""

    name: str
    version: int
    description: str
    steps: list[str] = Field(description="the step ids, in order")
    inputs: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime


class RoutineList(BaseModel):
    routines: list[RoutinePublic]


class RoutineVersionPublic(BaseModel):
    """One stored version of a routine."""

    hash: str = Field(description="sha256:<hex> of the YAML as stored: the version's id")
    stored_at: dt.datetime
    yaml_bytes: int = Field(description="the size of the YAML")
    current: bool = Field(description="true for the version stored last (what a new run runs)")


class RoutineVersionList(BaseModel):
    versions: list[RoutineVersionPublic]


class RunCreate(BaseModel):
    """The inputs of a run (defaults fill the rest)."""

    model_config = _FORBID
    inputs: dict[str, Any] = Field(default_factory=dict)


class RerunCreate(BaseModel):
    """Where a re-run starts: `from` a step, or (without it) the first step that failed or was cancelled."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str | None = Field(
        default=None,
        alias="from",
        max_length=64,
        description="the step to re-run from; the steps before it that succeeded are kept, not called",
    )


class RunError(BaseModel):
    """Why a run failed: the failed step and its error's code, reason and sentence."""

    model_config = ConfigDict(extra="allow")
    step: str | None = None
    code: str
    reason: str | None = None
    message: str


class RunPublic(BaseModel):
    """A run: its status, outputs, and each step's status, attempts, output or error."""

    run_id: str
    routine: str
    routine_version: int
    routine_hash: str | None = Field(
        default=None, description="the routine version the run ran (sha256:<hex> of its YAML)"
    )
    rerun_of: str | None = Field(default=None, description="the run this run re-ran, for a re-run")
    schedule_id: str | None = Field(default=None, description="the schedule that started this run")
    workflow_id: str
    status: str = Field(description="running, succeeded, failed or cancelled")
    inputs: dict[str, Any]
    outputs: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, StepResult] = Field(default_factory=dict)
    error: RunError | None = None
    created_at: dt.datetime
    finished_at: dt.datetime | None = None


class RunSummary(BaseModel):
    """A run in a list."""

    run_id: str
    routine: str
    status: str
    created_at: dt.datetime
    finished_at: dt.datetime | None = None


class RunList(BaseModel):
    runs: list[RunSummary]


class CancelAccepted(BaseModel):
    run_id: str
    status: str = Field(description="cancelling: the run stops its running steps and ends as cancelled")


class ScheduleCreate(BaseModel):
    """A schedule of a routine: a cron expression in a timezone, the runs' inputs, the overlap policy."""

    model_config = _FORBID
    cron: str = Field(
        max_length=200,
        description="five fields: minute hour day-of-month month day-of-week",
        examples=["0 7 * * 1-5"],
    )
    timezone: str = Field(
        default="UTC", max_length=64, description="an IANA timezone", examples=["Europe/Paris"]
    )
    inputs: dict[str, Any] = Field(default_factory=dict, description="the inputs of each scheduled run")
    overlap: Literal["skip", "buffer_one", "allow_all"] = Field(
        default="skip",
        description="when a run is due while the previous one still runs: skip it, run it once the "
        "previous one has ended (at most one waits), or run both",
    )


class SchedulePublic(BaseModel):
    """A schedule of a routine."""

    id: str
    routine: str
    cron: str
    timezone: str
    inputs: dict[str, Any]
    overlap: Literal["skip", "buffer_one", "allow_all"]
    paused: bool
    declared: bool = Field(
        description="declared by the routine file's on: schedule (replaced when it is stored)"
    )
    temporal_schedule_id: str = Field(description="the Temporal Schedule, as the Temporal UI shows it")
    next_runs: list[dt.datetime] = Field(default_factory=list, description="the next times it fires")
    created_at: dt.datetime


class ScheduleList(BaseModel):
    schedules: list[SchedulePublic]
