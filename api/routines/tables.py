"""The tables of routines.

- `routines`: one row per (organization, routine name): the YAML as sent, the validated routine as
  JSON, and a version that counts each replacement.
- `routine_versions`: every version of a routine ever stored, by the sha256 of its YAML (`sha256:<hex>`):
  a run names the version it ran (`routine_runs.routine_hash`), and a re-run runs that version again.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow


class RoutineRecord(SQLModel, table=True):
    """A stored, validated routine of one organization."""

    __tablename__ = "routines"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_routines_org_name"),)
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(max_length=40, index=True)
    name: str = Field(max_length=63)
    version: int = 1
    description: str = ""
    source: str = Field(description="the YAML as sent")
    routine: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class RoutineVersion(SQLModel, table=True):
    """One version of a routine as it was stored, kept after the routine is stored again."""

    __tablename__ = "routine_versions"
    org_id: str = Field(primary_key=True, max_length=40)
    name: str = Field(primary_key=True, max_length=63)
    hash: str = Field(primary_key=True, max_length=80, description="sha256:<hex> of the YAML as sent")
    source: str = Field(description="the YAML as sent")
    routine: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    stored_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
