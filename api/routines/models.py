"""Request and answer bodies of the routines API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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


class EstimateCreate(BaseModel):
    """What to estimate: a run's inputs (defaults fill the rest), and optionally a routine file instead of the
    stored version."""

    model_config = _FORBID
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="the run's inputs, as a run start takes them"
    )
    yaml: str | None = Field(
        default=None,
        min_length=1,
        max_length=512 * 1024,
        description="a routine file to estimate instead of the stored version (checked as a store checks it, "
        "not stored); its name must be the path's",
    )


class CallCeilingPublic(BaseModel):
    """The most one attempt of a step's call can cost, in micro-USD."""

    compute: int = Field(description="its compute for its whole time at its VM's full size")
    floor: int = Field(description="the per-call floor (a js call's requests included)")
    price: int = Field(description="the publisher's price, charged only by the attempt that succeeds")
    total: int = Field(description="compute + floor + price")


class StepCeiling(BaseModel):
    """The most one step can cost."""

    id: str
    ref: str = Field(description="the exact pin the step calls")
    tier: str = Field(description="vm, js or http")
    timeout_ms: int = Field(description="the longest one call may take")
    attempts: int = Field(
        description="the attempts of each call that can be charged (the step's max-attempts)"
    )
    items: int | None = Field(description="calls per attempt: 1, a foreach's items, or null when unbounded")
    items_from: str = Field(
        description="step (no foreach), literal (a literal list), inputs (the list the inputs give), "
        "max_items (the input's maxItems), unbounded, or failing (the foreach fails with these inputs: "
        "no call)"
    )
    call: CallCeilingPublic
    ceiling_microusd: int | None = Field(description="attempts x items calls at most; null when unbounded")
    note: str | None = Field(default=None, description="why the step is unbounded or calls nothing")


class RoutineEstimate(BaseModel):
    """The most a run can cost, per step and in all, in micro-USD (every step counted as taken)."""

    routine: str
    routine_hash: str = Field(description="the routine version estimated (sha256:<hex> of its YAML)")
    ceiling_microusd: int | None = Field(description="the most a run can cost in all; null when unbounded")
    unbounded: list[str] = Field(
        description="the steps whose calls have no bound (foreach of unknown length)"
    )
    steps: list[StepCeiling]
