"""The step activity's input and result: what the routine workflow sends the `call_action` activity
(activities.call_action) for one call of one step, and what it keeps of the answer.

They live in the engine, beside the workflow that sends them, so the workflow imports nothing from the
activities. Their field names and the activity's registered name are in every recorded history
(tests/engine/histories): add fields with defaults, never rename one.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

CALL_ACTION = "call_action"
"""The step activity's registered name."""


class CallActionInput(BaseModel):
    """One call of one step (one item of a foreach step)."""

    ref: str
    input: dict[str, Any] = Field(default_factory=dict)
    key_id: str
    grant: str | None = None  # the run's grant (RunRoutineInput.grant); None: the api refuses the call
    step_id: str
    index: int | None = None
    timeout_ms: int | None = None
    max_attempts: int | None = None  # the step's; None: Temporal's retry policy alone counts attempts
    # the run's workflow id, when the call comes from a foreach's child workflow (engine.foreach): the
    # idempotency key is derived from it; None: from the calling workflow's own id
    run_workflow_id: str | None = None


class CallActionResult(BaseModel):
    """The call's answer as the run keeps it."""

    output: Any = None
    attempt: int = 1
    call_id: str | None = None
    ref: str | None = None
    cost: dict[str, Any] | None = None
    output_bytes: int | None = None
