"""The table of schedules.

- `routine_schedules`: the schedules of a routine (api.schedules.service): the cron, timezone, inputs and
  overlap policy, whether the routine file declared it, the key its runs are started for, the
  sha256 of its schedule grant (what lets its Temporal Schedule ask this api for a run), and the id of
  its Temporal Schedule.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow
from engine.ticks import temporal_schedule_id


class RoutineSchedule(SQLModel, table=True):
    """A schedule of a routine: its Temporal Schedule is `temporal_id` (engine.ticks.temporal_schedule_id)."""

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
    temporal_id: str | None = Field(
        default=None,
        max_length=200,
        description="its Temporal Schedule: routine-schedule-<routine>-<id>; None: routine-schedule-<id>, "
        "the id of a schedule made before revision 0012",
    )

    @property
    def temporal_schedule_id(self) -> str:
        """The id of its Temporal Schedule."""
        return self.temporal_id or temporal_schedule_id(self.id)

    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
