"""What a routine run takes and gives: the models shared by the workflow, the runs service and the CLI.

A run's result has one shape whether it is read mid-run (the `progress` query) or at the end:

    {"status": "running" | "succeeded" | "failed" | "cancelled",
     "outputs": {...},
     "steps": {"<step id>": {
         "status": "pending" | "running" | "succeeded" | "failed" | "skipped" | "cancelled",
         "attempts": 1,
         "ref": "ns/pack/action@1.2.3" | None,   (the exact pin the step called)
         "output": {...} | [...] | None,
         "output_bytes": 812345 | None,          (set when the output is too large to travel here)
         "error": {"code", "reason", "message"} | None,
         "retrying": {"attempt", "item", "code", "reason", "message", "status", "retry_after",
                      "retry_in_s"} | None}}}   (set by the runs api while a call is retried)

This module is imported by the workflow sandbox: standard library and pydantic only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.routine import Routine, Step

ROUTINES_TASK_QUEUE = "b3os-routines"
"""The task queue the routine workers poll and the runs service starts workflows on."""

BUSY_TASK_QUEUE = "b3os-routines-busy"
"""The busy lane: the task queue of the runs of organizations with many in flight, polled by workers of its
own (api.runs.lanes)."""

WORKFLOW_TYPE = "routine"
"""The registered name of the one workflow type that runs every routine."""

SEARCH_ATTRIBUTE_ROUTINE = "B3osRoutine"
"""Keyword search attribute: the routine's name."""

SEARCH_ATTRIBUTE_ORG = "B3osOrg"
"""Keyword search attribute: the organization that started the run."""

SEARCH_ATTRIBUTE_RERUN_OF = "B3osRerunOf"
"""Keyword search attribute: the run a re-run re-ran (its run id); absent on other runs."""

SEARCH_ATTRIBUTE_SCHEDULE = "B3osSchedule"
"""Keyword search attribute: the schedule that started the run (its id); absent on other runs."""

SEARCH_ATTRIBUTES = (
    SEARCH_ATTRIBUTE_ROUTINE,
    SEARCH_ATTRIBUTE_ORG,
    SEARCH_ATTRIBUTE_RERUN_OF,
    SEARCH_ATTRIBUTE_SCHEDULE,
)
"""Every keyword search attribute b3os sets, registered by the worker and the api (engine.worker)."""

FOREACH_MAX_ITEMS = 10_000
"""The most items one foreach step runs."""

FOREACH_CHUNK_ITEMS = 1_000
"""The most items of one foreach step one workflow history carries (~5 events an item, where Temporal ends
a run at 51,200): a step with more runs its items in child workflows of this many each (engine.foreach)."""

FOREACH_WORKFLOW_TYPE = "routine-foreach"
"""The workflow type of a foreach's child workflows."""

RunStatus = Literal["running", "succeeded", "failed", "cancelled"]
StepStatus = Literal["pending", "running", "succeeded", "failed", "skipped", "cancelled"]


def routine_workflow_id(routine_name: str, run_id: str) -> str:
    """The workflow id of one run: `routine-<name>-<run id>`.

    Args:
        routine_name: The routine's name.
        run_id: The run's id (unique per run).

    Returns:
        The workflow id the runs service starts the run with.
    """
    return f"routine-{routine_name}-{run_id}"


def foreach_workflow_id(run_workflow_id: str, step_id: str, chunk: int) -> str:
    """The workflow id of one chunk of a foreach's items: `<run's workflow id>/foreach/<step id>/<chunk>`,
    chunk `k` holding items `k * FOREACH_CHUNK_ITEMS` on (the api checks a chunk's calls against it)."""
    return f"{run_workflow_id}/foreach/{step_id}/{chunk}"


def is_foreach_workflow_id(workflow_id: str, run_workflow_id: str, step_id: str) -> bool:
    """Whether `workflow_id` is the id of a chunk of step `step_id` of the run of `run_workflow_id`."""
    head, _, chunk = workflow_id.rpartition("/")
    return head == f"{run_workflow_id}/foreach/{step_id}" and chunk.isdigit()


class StepError(BaseModel):
    """Why a step failed: the action error's code, reason and sentence."""

    model_config = ConfigDict(extra="allow")

    code: str
    reason: str | None = None
    message: str


def _absent(value: Any) -> bool:
    """Fields added to a step are left out of its JSON while they are None (older readers see no change)."""
    return value is None


class StepRetry(BaseModel):
    """A running step's call that failed and is tried again: read from Temporal, never kept in history.

    `attempt` is the attempt running now or next; `code`, `reason`, `message`, `status` (the api's HTTP
    status) and `retry_after` (seconds the api asked to wait) say why the previous attempt failed;
    `retry_in_s` is how long until the next attempt starts (None when it runs now).
    """

    attempt: int
    item: int | None = None
    code: str | None = None
    reason: str | None = None
    message: str | None = None
    status: int | None = None
    retry_after: float | None = None
    retry_in_s: float | None = None


class StepResult(BaseModel):
    """One step of a run as the API and CLI show it."""

    name: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="the step's name: (its title for run views), when it has one",
    )
    status: StepStatus = "pending"
    attempts: int = 0
    ref: str | None = None
    output: Any = None
    output_bytes: int | None = Field(
        default=None,
        exclude_if=_absent,
        description="the output's size when it is too large to travel in the run's progress and result "
        "(output is null then; GET /v1/runs/{id} reads it from the run's history once the run has ended)",
    )
    error: StepError | None = None
    retrying: StepRetry | None = Field(
        default=None,
        exclude_if=_absent,
        description="while the step's call is retried: its attempt and why the last one failed",
    )
    reused: bool | None = Field(
        default=None,
        exclude_if=_absent,
        description="true when a re-run kept this step from the run it re-ran (no call, no charge)",
    )


class RunRoutineInput(BaseModel):
    """The workflow's input: a validated routine and the inputs with defaults applied.

    `key_id` is the id of the API key that started the run (never a secret): each step's call is
    made on its behalf. `pins` maps each `uses:` ref to the exact version it resolved to when the run
    started (`ns/pack/action@1.2.3`): the run calls what it was validated against. `grant` is the
    run's grant, minted by the api when it started the run (api.runs.grants): each step's call sends
    it, and the api honours no call without it (None in runs started before grants, and in runs
    started on Temporal by anything but the api: their steps' calls are refused).

    `reused` holds the steps a re-run keeps from the run it re-runs (POST /v1/runs/{id}/rerun): each
    ends at once with its old status, attempts, pin and output, and calls nothing (empty in every
    other run, and in histories recorded before re-runs).
    """

    routine: Routine
    inputs: dict[str, Any] = Field(default_factory=dict)
    org_id: str
    key_id: str
    run_id: str
    pins: dict[str, str] = Field(default_factory=dict)
    grant: str | None = None
    reused: dict[str, StepResult] = Field(default_factory=dict)
    event: dict[str, Any] | None = None
    """The event that started the run, read as `event` (a run a trigger started; None in every other)."""


class RunRoutineResult(BaseModel):
    """The workflow's result, and the answer of its `progress` query mid-run."""

    status: RunStatus = "running"
    outputs: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, StepResult] = Field(default_factory=dict)


class ForeachChunkInput(BaseModel):
    """One child workflow's share of a foreach: items `first` to `first + len(items) - 1` of `step`.

    `names` are the names in scope the step's `with:` reads (`inputs`, and of `steps` only the steps it
    names); `run_workflow_id` is the run's own workflow id, from which every call's idempotency key is
    derived as if the run had made it."""

    step: Step
    names: dict[str, Any] = Field(default_factory=dict)
    items: list[Any] = Field(default_factory=list)
    first: int = 0
    key_id: str
    grant: str | None = None
    pins: dict[str, str] = Field(default_factory=dict)
    run_workflow_id: str


class ItemOutcome(BaseModel):
    """One item's call as a chunk returns it: its output, or the error it failed with."""

    output: Any = None
    output_bytes: int | None = None
    attempts: int = 0
    ref: str | None = None
    error: StepError | None = None


class ForeachChunkResult(BaseModel):
    """A chunk's items, in item order (`step_id` and `first` say where they sit in the step's list)."""

    step_id: str
    first: int = 0
    items: list[ItemOutcome] = Field(default_factory=list)
