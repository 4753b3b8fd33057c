"""A step's call as Temporal retries it (`retry_policy`), as the Temporal UI names it (`summary`) and as its
run reads it once it failed for good (`step_error`). Workflow code: deterministic, no I/O."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy as TemporalRetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError

from engine.routine import RetryPolicy
from engine.runs import StepError

WAITS_PER_STEP = 100
"""429/503 refusals a call may wait out beyond its max-attempts before the step fails."""

SUMMARY_BYTES = 256
"""The longest activity summary (UTF-8 bytes; a longer `name:` is cut): the Temporal server limits a
summary's size (its MaxUserMetadataSummarySize), and a workflow command it refuses would fail the run's
workflow task."""


def summary(step_id: str, name: str | None, index: int | None, ref: str) -> str:
    """What the Temporal UI shows for a step's call: `Fetch the weather (weather) · ns/pack/action@1`,
    `weather[2] · ...` for an item of a foreach, the step's id alone when it has no `name:`.

    Temporal keeps it in the command's user metadata, which replay does not compare (a run recorded with
    another summary replays: tests/engine/test_history_replay.py)."""
    label = step_id if index is None else f"{step_id}[{index}]"
    text = f"{name} ({label}) · {ref}" if name else f"{label} · {ref}"
    return text.encode()[:SUMMARY_BYTES].decode(errors="ignore")


def retry_policy(policy: RetryPolicy | None) -> TemporalRetryPolicy:
    """The Temporal retry policy of a step (the routine's defaults when the step sets none).

    Raises:
        ValueError: a policy Temporal would refuse (the sentence says which value).
    """
    p = policy or RetryPolicy()
    backoff, longest = p.backoff_timedelta, p.max_backoff_timedelta
    if p.max_attempts < 1:
        raise ValueError(f"max-attempts is {p.max_attempts}; it must be at least 1")
    if backoff <= timedelta(0):
        raise ValueError("backoff must be longer than 0")
    if longest < backoff:
        raise ValueError(f"max-backoff ({longest}) is shorter than backoff ({backoff})")
    if p.backoff_coefficient < 1:
        raise ValueError(f"backoff-coefficient is {p.backoff_coefficient}; it must be at least 1")
    return TemporalRetryPolicy(
        # the step's max-attempts is counted by the activity (activities.call_action.Ledger), where a
        # 429/503 that asks to wait is not a failure; Temporal's own bound only stops endless waiting
        maximum_attempts=p.max_attempts + WAITS_PER_STEP,
        initial_interval=backoff,
        backoff_coefficient=p.backoff_coefficient,
        maximum_interval=longest,
    )


def step_error(exc: ActivityError, policy: TemporalRetryPolicy) -> tuple[StepError, int]:
    """The code, reason and sentence of an activity that failed for good, and its attempts."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
        fields = dict(cause.details[0])
        attempts = int(fields.pop("attempt", 0) or 0)
        for name in ("status", "idempotency_key"):
            fields.pop(name, None)
        fields.setdefault("code", cause.type or "activity_failed")
        fields.setdefault("message", cause.message)
        return StepError.model_validate(fields), attempts
    if isinstance(cause, TimeoutError):
        kind = cause.type.name.lower() if cause.type is not None else "timeout"
        message = f"the step's call did not finish in time ({kind})"
        return StepError(code="step_timed_out", reason=kind, message=message), policy.maximum_attempts
    if isinstance(cause, CancelledError):
        return StepError(code="cancelled", reason=None, message="the step's call was cancelled"), 0
    text = str(cause) if cause is not None else str(exc)
    return StepError(code="activity_failed", reason=type(cause).__name__ if cause else None, message=text), 0
