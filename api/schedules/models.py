"""Request and answer bodies of the schedules API."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_FORBID = ConfigDict(extra="forbid")


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
