"""The tables of runs.

- `routine_runs`: one row per run: its workflow id, the key that started it, the Idempotency-Key
  and request hash when one was sent, and the final result once the run has ended (so a finished
  run is read without asking Temporal).
- `run_grants`: what lets a run's steps call actions (api.runs.grants): the sha256 of a random secret
  minted when the api starts the run, the run, organization, key and workflow it is bound to, when
  it expires (the run's execution timeout), and when the run was cancelled or seen to end.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from api.models import UTCDateTime, utcnow


class RunRecord(SQLModel, table=True):
    """One run of a routine."""

    __tablename__ = "routine_runs"
    __table_args__ = (
        UniqueConstraint("org_id", "idempotency_key", name="uq_routine_runs_org_key"),
        Index("ix_routine_runs_org_created", "org_id", "created_at"),
        Index("ix_routine_runs_org_routine_created", "org_id", "routine_name", "created_at"),  # ?routine=
    )
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(max_length=40)
    key_id: str = Field(max_length=40, description="the API key that started the run")
    routine_name: str = Field(max_length=63)
    routine_version: int
    workflow_id: str = Field(max_length=200)
    idempotency_key: str | None = Field(default=None, max_length=255)
    request_hash: str = Field(max_length=80)
    inputs: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default="running", max_length=20)
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    finished_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)
    routine_hash: str | None = Field(
        default=None, max_length=80, description="the routine version it ran (None: before versions)"
    )
    pins: dict[str, str] | None = Field(
        default=None, sa_column=Column(JSON, nullable=True), description="each uses: and the pin it ran"
    )
    rerun_of: str | None = Field(default=None, max_length=40, description="the run this run re-ran")
    schedule_id: str | None = Field(default=None, max_length=40, description="the schedule that started it")
    event: dict[str, Any] | None = Field(
        default=None,
        sa_column=Column(JSON, nullable=True),
        description="the trigger event that started it (a re-run runs with it again)",
    )
    max_cost_microusd: int | None = Field(
        default=None, sa_type=BigInteger, description="the most the run may cost (api.routines.ceiling)"
    )


class RunGrant(SQLModel, table=True):
    """A run's grant: its steps' calls are honoured while it is neither ended, cancelled nor expired."""

    __tablename__ = "run_grants"
    grant_hash: str = Field(primary_key=True, max_length=64, description="sha256 of the secret, hex")
    run_id: str = Field(max_length=40, index=True)
    org_id: str = Field(max_length=40)
    key_id: str = Field(max_length=40, description="the API key that started the run")
    workflow_id: str = Field(max_length=200)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    expires_at: dt.datetime = Field(sa_type=UTCDateTime)
    cancelled_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)
    ended_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)
    cleanup_steps: list[str] = Field(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="the steps whose if: calls always() or cancelled(): they may call after a cancel",
    )
    steps: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        sa_column=Column(JSON, nullable=False),
        description='each step of the run\'s routine version: {"ref": the pinned ref it calls, "foreach": '
        "whether it has items}; the only steps and actions its grant calls (empty: minted before steps were "
        "bound)",
    )
    execution_id: str | None = Field(
        default=None,
        max_length=64,
        description="the Temporal run id of the workflow the api started: the one execution its grant serves",
    )
    max_cost_microusd: int | None = Field(
        default=None,
        sa_type=BigInteger,
        description="the most the run's calls may cost in all (None: no max)",
    )
