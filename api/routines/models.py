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
