"""Request and answer bodies of the runs API."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from api.numbers import integral
from engine.routine import STEP_ID_PATTERN
from engine.runs import StepResult

_FORBID = ConfigDict(extra="forbid")


class RunCreate(BaseModel):
    """The inputs of a run (defaults fill the rest)."""

    model_config = _FORBID
    inputs: dict[str, Any] = Field(default_factory=dict)
    max_cost_microusd: Annotated[StrictInt, Field(ge=0, le=2**53 - 1), BeforeValidator(integral)] | None = (
        Field(
            default=None,
            description="the most the run may cost, in micro-USD: refused before it starts when its "
            "ceiling (POST /v1/routines/{name}/estimate) is above it or unbounded, and stopped at the step "
            "whose call could take it past it",
        )
    )


class RerunCreate(BaseModel):
    """Where a re-run starts: `from` a step, or (without it) the first step that failed or was cancelled."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str | None = Field(
        default=None,
        alias="from",
        min_length=1,
        max_length=64,
        pattern=STEP_ID_PATTERN,
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
    max_cost_microusd: int | None = Field(
        default=None, description="the run's max cost, when it started with one"
    )


class RunSummary(BaseModel):
    """A run in a list."""

    run_id: str
    routine: str
    rerun_of: str | None = Field(default=None, description="the run this run re-ran, for a re-run")
    schedule_id: str | None = Field(default=None, description="the schedule that started this run")
    status: str
    created_at: dt.datetime
    finished_at: dt.datetime | None = None


class RunList(BaseModel):
    runs: list[RunSummary]


class CancelAccepted(BaseModel):
    run_id: str
    status: str = Field(description="cancelling: the run stops its running steps and ends as cancelled")
