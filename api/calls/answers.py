"""A call's answer and the outcome metered from it.

The one answer shape: `{call_id, ref, tier, output, cost, timings}` for a call that succeeded; for one that
failed, the error object with those fields added (`tier` too), its status and its headers (Retry-After).
The outcome (`api.calls.metering.Outcome`) is what the call's row and meter events record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.calls.costs import Cost
from api.calls.executor import Execution
from api.calls.metering import Outcome
from api.calls.tables import ActionCall
from api.errors import CallError
from packs.resolve import Resolved


@dataclass
class Answer:
    """The answer of a call: HTTP status, JSON body and headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_error(cls, exc: CallError) -> Answer:
        """The answer of a call refused or failed with `exc`."""
        return cls(exc.status, exc.body(), exc.headers)


def answer_of(
    tier: str, call: ActionCall, resolved: Resolved, execution: Execution, validate_ms: float
) -> Answer:
    """The one answer shape: `{call_id, ref, tier, output, cost, timings}`, or the error with them."""
    phases = {"validate": validate_ms, **execution.phases}
    shared = {
        "call_id": call.id,
        "ref": resolved.pin,
        "cost": execution.cost.as_dict(),
        "timings": phases,
    }
    error = execution.error
    if error is not None:
        body = error.body()
        body["error"].update({**shared, "tier": tier})
        return Answer(error.status, body, error.headers)
    return Answer(
        200,
        {
            "call_id": call.id,
            "ref": resolved.pin,
            "tier": tier,
            "output": execution.output,
            "cost": shared["cost"],
            "timings": phases,
        },
    )


def outcome_of(execution: Execution) -> Outcome:
    """How an admitted call ended, as its row and meter events record it."""
    error = execution.error
    return Outcome(
        status=200 if error is None else error.status,
        code=None if error is None else error.code,
        reason=None if error is None else error.reason,
        ran=execution.ran,
        vcpu_ms=execution.vcpu_ms,
        gib_ms=execution.gib_ms,
        cost=execution.cost,
        units=tuple(execution.units),
    )


def failed_outcome() -> Outcome:
    """The outcome of an admitted call whose work failed in this api (500 internal, nothing charged)."""
    return Outcome(status=500, code="internal", reason=None, ran=False, vcpu_ms=0, gib_ms=0, cost=Cost())
