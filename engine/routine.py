"""The routine language: pydantic models of a routine YAML file.

A routine has `name`, `description`, `inputs` (JSON-Schema-typed, with defaults), `max-parallel`,
`steps`, `outputs` and `on:` (its schedules). A step has `id`, `uses`, `with`, and the controls
`needs`, `if`, `timeout`, `retry`, `continue-on-error` and `foreach`. Values may hold `${{ }}` CEL expressions
(engine.expressions).

A step waits for the steps its `needs:` names (`[]`: none); a step without `needs:` waits for the
step before it (the first step for none), so a routine without `needs:` runs its steps in order.
engine.step_graph computes that graph for the workflow and the validator alike.

The workflow receives only a validated `Routine` (parsing and validation happen at the edge, in
engine.validate). This module imports only the standard library, pydantic, engine.cron, engine.durations
and engine.step_graph (no more than these), so the workflow sandbox can load it. The reference is
docs/routines.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_validator,
)

from engine.cron import Overlap
from engine.durations import Duration, duration_ms, parse_duration
from engine.step_graph import direct_needs

STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
"""A step id is a CEL identifier, so that `steps.<id>` reads it: letters, digits and `_`."""

ROUTINE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"

USES_PATTERN = (
    r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+"
    r"/[a-z0-9]([a-z0-9-]*[a-z0-9])?/[a-z0-9]([a-z0-9-]*[a-z0-9])?"
    r"@(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*))?$"
)
"""`ns/pack/action@1` (newest 1.x.y) or `ns/pack/action@1.0.0` (exact); packs.refs has the full rules."""

MAX_PARALLEL_DEFAULT = 4
"""Steps a run runs at once when the routine does not set `max-parallel`."""

MAX_PARALLEL_LIMIT = 32
"""The largest `max-parallel` a routine may set."""

INPUT_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
"""An input name is a CEL identifier, so that `inputs.<name>` reads it."""

InputName = Annotated[str, Field(pattern=INPUT_NAME_PATTERN)]

InputType = Literal["string", "integer", "number", "boolean", "array", "object"]

StepStatus = Literal["succeeded", "failed", "skipped", "cancelled"]
"""What `steps.<id>.status` reads once a step has ended (cancelled: in an always() or cancelled() step)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RetryPolicy(_Model):
    """How a step is retried after a retryable failure. Retry-After always wins over backoff."""

    max_attempts: Annotated[int, Strict()] = Field(
        default=3,
        alias="max-attempts",
        ge=1,
        le=100,
        description="Attempts in all, the first included; 1 means no retry.",
    )
    backoff: Duration = Field(
        default="1s", description="The delay before the second attempt, such as 500ms, 1s, 2m."
    )
    backoff_coefficient: Annotated[float, Strict()] = Field(
        default=2.0,
        alias="backoff-coefficient",
        ge=1.0,
        le=10.0,
        description="Each further delay is the previous one times this.",
    )
    max_backoff: Duration = Field(
        default="60s", alias="max-backoff", description="No delay between attempts is longer than this."
    )

    @model_validator(mode="after")
    def _backoff_fits(self) -> RetryPolicy:
        if duration_ms(self.backoff) <= 0:
            raise ValueError(f"backoff {self.backoff} must be longer than 0")
        if duration_ms(self.backoff) > duration_ms(self.max_backoff):
            raise ValueError(
                f"backoff {self.backoff} is longer than max-backoff {self.max_backoff}: "
                "the first delay cannot exceed the longest one"
            )
        return self

    @property
    def backoff_timedelta(self) -> timedelta:
        """`backoff` as a timedelta."""
        return parse_duration(self.backoff)

    @property
    def max_backoff_timedelta(self) -> timedelta:
        """`max-backoff` as a timedelta."""
        return parse_duration(self.max_backoff)


class InputSpec(_Model):
    """One routine input: a JSON Schema (draft 2020-12) fragment with an optional default.

    An input without `default` is required. Other JSON Schema keywords (`enum`, `minimum`,
    `items`, `pattern`, ...) are allowed and checked when a run starts.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    type: InputType | None = Field(default=None, description="The JSON type of the value.")
    description: str | None = Field(default=None, description="What the input is for.")
    default: Any = Field(default=None, description="The value when the run does not give one.")

    @property
    def required(self) -> bool:
        """Whether a run must give this input (it has no `default`)."""
        return "default" not in self.model_fields_set

    def json_schema(self) -> dict[str, Any]:
        """This input as a plain JSON Schema (without `default`)."""
        schema = self.model_dump(exclude_none=True, exclude={"default"})
        return schema


MIN_TIMEOUT_MS = 1000
"""The shortest step `timeout` a routine may be stored with (engine.validate; the model itself takes any
positive one, so that routines and runs stored before still load): a call through the api to a node or
the egress takes tens to hundreds of milliseconds, so a shorter timeout would fail every attempt."""


class Step(_Model):
    """One step: a call of a pack action, with its controls."""

    id: str = Field(
        pattern=STEP_ID_PATTERN,
        description="Unique in the routine; expressions read the step as steps.<id>. Letters, digits and _.",
    )
    uses: str = Field(
        pattern=USES_PATTERN,
        description="The action: ns/pack/action@1 (newest 1.x.y) or ns/pack/action@1.0.0 (exact).",
        examples=["com.example.tools/echo/echo@1"],
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="The action's input. Values may hold ${{ }} expressions; "
        "a whole-value one keeps its type.",
    )
    needs: list[str] | None = Field(
        default=None,
        description="The ids of the steps this step waits for ([] to start at once); without needs:, "
        "the step waits for the step before it. The step's expressions read only the steps it needs, "
        "directly or through others.",
        examples=[["fetch", "parse"], []],
    )
    if_: str | bool | None = Field(
        default=None,
        alias="if",
        description="Run the step only when this CEL expression (bare or in ${{ }}) is true; "
        "otherwise it is skipped. Without a status function (success(), failure(), always(), "
        "cancelled()), it runs only when success() too: none of its needs failed or was cancelled.",
    )
    timeout: Duration | None = Field(
        default=None,
        description="The longest one attempt may take, such as 30s; the action's own limit by default.",
    )
    retry: RetryPolicy | None = Field(default=None, description="How failed attempts are retried.")
    continue_on_error: Annotated[bool, Strict()] = Field(
        default=False,
        alias="continue-on-error",
        description="When the step fails, record status failed and go on instead of failing the routine.",
    )
    foreach: str | list[Any] | None = Field(
        default=None,
        description="Run the action once per item of this list (an expression or a literal list); "
        "with: reads item and index.",
    )
    name: str | None = Field(default=None, description="A human title, shown in run views.")

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, value: str | None) -> str | None:
        if value is not None and duration_ms(value) <= 0:
            raise ValueError(f"timeout {value} must be longer than 0 (leave it out for the action's limit)")
        return value

    @property
    def timeout_timedelta(self) -> timedelta | None:
        """`timeout` as a timedelta, or None."""
        return parse_duration(self.timeout) if self.timeout else None


SCHEDULES_PER_ROUTINE = 10
"""The most schedules one routine may have (declared in its file or created over the api)."""


class ScheduleTrigger(_Model):
    """One schedule of a routine: a cron expression in a timezone, the run's inputs, the overlap policy.

    The cron expression and timezone are checked at the edge (engine.cron, engine.validate).
    """

    cron: str = Field(
        description="Five fields: minute hour day-of-month month day-of-week, such as '0 7 * * 1-5'.",
        examples=["0 7 * * 1-5", "*/15 * * * *"],
    )
    timezone: str = Field(default="UTC", description="The IANA timezone of the cron expression.")
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="The inputs of each scheduled run (the routine's defaults fill the rest).",
    )
    overlap: Overlap = Field(
        default="skip",
        description="When a run is due while the previous one still runs: skip it, run it after "
        "(buffer_one: at most one waits), or run both (allow_all).",
    )


class Triggers(_Model):
    """What starts the routine on its own: its schedules, applied when the routine is stored."""

    schedule: list[ScheduleTrigger] = Field(
        default_factory=list,
        max_length=SCHEDULES_PER_ROUTINE,
        description="Temporal Schedules that start a run of the routine; storing the routine creates or "
        "replaces them.",
    )


TRIGGERS_PER_ROUTINE = 10
"""The most triggers (`on: [{trigger: ...}]`) one routine may subscribe to."""

CONNECTION_KEY_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"


class EventTrigger(_Model):
    """A subscription to a pack's trigger: each of its events starts a run, with the event as `event`."""

    trigger: str = Field(
        pattern=USES_PATTERN,
        description="The trigger: ns/pack/trigger@1 (newest 1.x.y) or ns/pack/trigger@1.0.0 (exact).",
        examples=["io.b3os/github/issue-opened@1"],
    )
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="The trigger's input (its inputSchema): literal values, such as the repository to watch.",
    )
    connection: str | None = Field(
        default=None,
        pattern=CONNECTION_KEY_PATTERN,
        description="The pack's connection a poll trigger uses (one of the trigger's connections); the "
        "organization's connection of that key is used.",
    )
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="The inputs of each run it starts (the routine's defaults fill the rest).",
    )


def _on_item(value: Any) -> str:
    return "trigger" if isinstance(value, dict) and "trigger" in value else "schedule"


OnItem = Annotated[
    Annotated[EventTrigger, Tag("trigger")] | Annotated[ScheduleTrigger, Tag("schedule")],
    Discriminator(_on_item),
]


class Routine(_Model):
    """A routine: inputs, steps run in order, and outputs."""

    name: str = Field(
        pattern=ROUTINE_NAME_PATTERN,
        description="Lowercase letters, digits and hyphens, up to 63 characters.",
    )
    description: str = Field(default="", description="What the routine does.")
    inputs: dict[InputName, InputSpec] = Field(
        default_factory=dict,
        description="The values a run takes, by name; read as inputs.<name>.",
        json_schema_extra={"propertyNames": {"pattern": INPUT_NAME_PATTERN}},
    )
    max_parallel: Annotated[int, Strict()] = Field(
        default=MAX_PARALLEL_DEFAULT,
        alias="max-parallel",
        ge=1,
        le=MAX_PARALLEL_LIMIT,
        description=f"The most steps that run at once (1 to {MAX_PARALLEL_LIMIT}); steps whose needs "
        "are met start in file order while fewer run.",
    )
    steps: list[Step] = Field(
        min_length=1,
        description="The steps. A step waits for its needs: (or, without needs:, for the step before it).",
    )
    outputs: dict[str, Any] = Field(
        default_factory=dict,
        description="The run's result, by name; values may hold ${{ }} expressions over inputs and steps.",
    )
    on: Triggers | list[OnItem] | None = Field(
        default=None,
        description="What starts the routine on its own: `{schedule: [...]}`, a list of cron schedules, or a "
        "list whose items are pack triggers (`{trigger: ns/pack/key@1, with: {...}}`) and cron schedules "
        "(`{cron: ...}`).",
        examples=[
            {"schedule": [{"cron": "0 7 * * 1-5", "timezone": "Europe/Paris"}]},
            [{"trigger": "io.b3os/github/issue-opened@1"}, {"cron": "0 7 * * 1-5"}],
        ],
    )

    @property
    def schedules(self) -> list[ScheduleTrigger]:
        """The schedules of `on:`, in either form."""
        if isinstance(self.on, Triggers):
            return list(self.on.schedule)
        return [item for item in self.on or [] if isinstance(item, ScheduleTrigger)]

    @property
    def event_triggers(self) -> list[EventTrigger]:
        """The pack triggers `on:` subscribes to."""
        return (
            [item for item in self.on or [] if isinstance(item, EventTrigger)]
            if isinstance(self.on, list)
            else []
        )

    @model_validator(mode="after")
    def _on_fits(self) -> Routine:
        if len(self.schedules) > SCHEDULES_PER_ROUTINE:
            raise ValueError(
                f"on: has {len(self.schedules)} schedules; a routine has at most {SCHEDULES_PER_ROUTINE}"
            )
        if len(self.event_triggers) > TRIGGERS_PER_ROUTINE:
            raise ValueError(
                f"on: has {len(self.event_triggers)} triggers; a routine has at most {TRIGGERS_PER_ROUTINE}"
            )
        return self

    def step(self, step_id: str) -> Step:
        """The step with this id.

        Raises:
            KeyError: no step has this id.
        """
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def step_needs(self) -> dict[str, tuple[str, ...]]:
        """Each step's direct needs, by step id (the step before it when it sets no `needs:`)."""
        return direct_needs([(step.id, step.needs) for step in self.steps])
