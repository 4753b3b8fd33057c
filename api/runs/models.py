"""Request and answer bodies of the routines and runs API."""

from __future__ import annotations

import datetime as dt
from typing import Any

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


class RunCreate(BaseModel):
    """The inputs of a run (defaults fill the rest)."""

    model_config = _FORBID
    inputs: dict[str, Any] = Field(default_factory=dict)


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
