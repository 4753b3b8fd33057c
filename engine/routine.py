"""The routine language: pydantic models of a routine YAML file.

A routine has `name`, `description`, `inputs` (JSON-Schema-typed, with defaults), `steps` and
`outputs`. A step has `id`, `uses`, `with`, and the controls `if`, `timeout`, `retry`,
`continue-on-error` and `foreach`. Values may hold `${{ }}` CEL expressions (engine.expressions).

The workflow receives only a validated `Routine` (parsing and validation happen at the edge).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RetryPolicy(_Model):
    """How a step is retried after a retryable failure. Retry-After always wins over backoff."""

    max_attempts: int = Field(default=3, alias="max-attempts", ge=1, le=100)
    backoff: str = Field(default="1s", description="first delay, a duration such as 500ms, 1s, 2m")
    backoff_coefficient: float = Field(default=2.0, alias="backoff-coefficient", ge=1.0, le=10.0)
    max_backoff: str = Field(default="60s", alias="max-backoff")


class InputSpec(_Model):
    """One routine input: a JSON Schema fragment with an optional default."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    type: str | None = None
    description: str | None = None
    default: Any = None


class Step(_Model):
    id: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    uses: str
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    if_: str | None = Field(default=None, alias="if")
    timeout: str | None = None
    retry: RetryPolicy | None = None
    continue_on_error: bool = Field(default=False, alias="continue-on-error")
    foreach: str | list[Any] | None = None
    name: str | None = None


class Routine(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    description: str = ""
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)
    outputs: dict[str, Any] = Field(default_factory=dict)
