"""The table of schedules.

- `routine_schedules`: the schedules of a routine (api.schedules.service): the cron, timezone, inputs and
  overlap policy, whether the routine file declared it, the key its runs are started for, and the
  sha256 of its schedule grant (what lets its Temporal Schedule ask this api for a run).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow


class RoutineSchedule(SQLModel, table=True):
    """A schedule of a routine: its Temporal Schedule is `routine-schedule-<id>`."""

    __tablename__ = "routine_schedules"
    __table_args__ = (Index("ix_routine_schedules_org_routine", "org_id", "routine_name"),)
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(max_length=40)
    routine_name: str = Field(max_length=63)
    key_id: str = Field(max_length=40, description="the API key its runs are started for")
    cron: str = Field(max_length=200)
    timezone: str = Field(max_length=64)
    inputs: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    overlap: str = Field(max_length=20)
    declared: bool = Field(default=False, description="declared by the routine file's on: schedule")
    paused: bool = False
    grant_hash: str = Field(max_length=64, description="sha256 of the schedule's grant, hex")
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
