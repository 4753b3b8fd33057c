"""How a routine run fails for good: the non-retryable `ApplicationError` the workflow raises, whose
message the Temporal UI shows and whose details carry the error and the run's result.

- a step that failed without `continue-on-error`: type `StepFailed`, message `step <id> failed: <code>
  (<reason>): <message>`, details `[{"step", "code", "reason", "message"}, <the run's result>]`;
- the run's outputs or its result (too large, an expression that failed): type `OutputsFailed`, raised
  as a `RunFailure` from inside the run's own code.

The run's result goes in the details without its step outputs when it would not fit in one payload.
Deterministic, no I/O: the workflow sandbox passes it through with engine.workflow.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError

from engine import payloads
from engine.runs import RunRoutineResult, StepError

RESULT_LIMIT_BYTES = payloads.PAYLOAD_LIMIT_BYTES - 64 * payloads.KIB
"""The largest result the workflow returns (one Temporal payload, with room for its wrapping)."""


class RunFailure(Exception):
    """The run fails for good outside any step's call (its outputs, its result); already has its error."""

    def __init__(self, error: ApplicationError) -> None:
        super().__init__(error.message)
        self.error = error


def run_details(result: RunRoutineResult) -> dict[str, Any]:
    """The run's result for a failure's details: without step outputs when it would not fit."""
    details = result.model_dump(mode="json")
    try:
        payloads.measure(details, "the run's result", RESULT_LIMIT_BYTES)
    except payloads.PayloadError:
        details["outputs"] = {}
        for step in details["steps"].values():
            step["output"] = None
    return details


def step_failure(step_id: str, error: StepError, result: RunRoutineResult) -> ApplicationError:
    """The run's failure for a step that failed for good."""
    reason = f" ({error.reason})" if error.reason else ""
    details = {"step": step_id, "code": error.code, "reason": error.reason, "message": error.message}
    return ApplicationError(
        f"step {step_id} failed: {error.code}{reason}: {error.message}",
        details,
        run_details(result),
        type="StepFailed",
        non_retryable=True,
    )


def outputs_failure(result: RunRoutineResult, code: str, reason: str, message: str) -> RunFailure:
    """The run's failure for its outputs or its result."""
    error = {"step": None, "code": code, "reason": reason, "message": message}
    return RunFailure(
        ApplicationError(
            f"outputs failed: {code} ({reason}): {message}",
            error,
            run_details(result),
            type="OutputsFailed",
            non_retryable=True,
        )
    )


def largest_output(outputs: dict[str, Any]) -> str:
    """`; the largest is outputs.x (1.2 MiB)`, for a sentence about outputs that are too large."""
    sizes = {name: len(payloads.encode(value)) for name, value in outputs.items()}
    if not sizes:
        return ""
    name = max(sizes, key=lambda n: sizes[n])
    return f"; the largest is outputs.{name} ({payloads.size_text(sizes[name])})"
