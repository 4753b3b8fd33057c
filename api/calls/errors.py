"""Errors of an action call: subclasses of the api's `CallError`, so its one handler answers them.

    ApiError (api.errors)
    └── CallError (api.errors)      reason, details, retry_after (whole seconds, also as Retry-After)
        ├── CallInvalid             400 invalid_request (with `errors`: path and message each)
        ├── RefNotOfStep            403 forbidden (reason ref_not_of_step: a routine step's other ref)
        ├── RunMaxCost              403 forbidden (reason max_cost: the call could take its run past its max)
        ├── RefNotFound             404 not_found (names the ref)
        ├── IdempotencyInProgress   409 idempotency_in_progress
        ├── BodyTooLarge            413 payload_too_large
        ├── IdempotencyKeyReused    422 idempotency_key_reused
        ├── RateLimited (api.errors) 429 rate_limited
        ├── ConcurrencyLimited      429 concurrency_limited
        ├── QuotaExceeded           429 quota_exceeded
        ├── ToolFailed              502 tool_failed (reason and its details)
        ├── ToolUnavailable         503 tool_unavailable (reason; nothing billed)
        ├── PackUnavailable         503 pack_unavailable
        └── ToolTimedOut            504 tool_timed_out

Every 429 and 503 carries `retry_after`: whole seconds computed from the state that refused the call.
The body is the api's one shape: `{"error": {"code", "message", "reason"?, ...details, "retry_after"?}}`.
"""

from __future__ import annotations

from api.errors import CallError


class CallInvalid(CallError):
    status = 400
    code = "invalid_request"


class RefNotOfStep(CallError):
    status = 403
    code = "forbidden"


class RunMaxCost(CallError):
    """A routine step's call that could take its run past the run's `max_cost_microusd` (final: the step
    fails, no retry could fit)."""

    status = 403
    code = "forbidden"


class RefNotFound(CallError):
    status = 404
    code = "not_found"


class IdempotencyInProgress(CallError):
    status = 409
    code = "idempotency_in_progress"


class BodyTooLarge(CallError):
    status = 413
    code = "payload_too_large"


class IdempotencyKeyReused(CallError):
    status = 422
    code = "idempotency_key_reused"


class ConcurrencyLimited(CallError):
    status = 429
    code = "concurrency_limited"


class QuotaExceeded(CallError):
    status = 429
    code = "quota_exceeded"


class ToolFailed(CallError):
    status = 502
    code = "tool_failed"


class ToolUnavailable(CallError):
    status = 503
    code = "tool_unavailable"


class PackUnavailable(CallError):
    status = 503
    code = "pack_unavailable"


class ToolTimedOut(CallError):
    status = 504
    code = "tool_timed_out"


class ActionFailed(CallError):
    status = 502
    code = "action_failed"


class ActionUnavailable(CallError):
    status = 503
    code = "action_unavailable"


class ActionTimedOut(CallError):
    status = 504
    code = "action_timed_out"


NODE_ERRORS: dict[str, type[CallError]] = {
    cls.code: cls for cls in (ToolFailed, ToolUnavailable, PackUnavailable, ToolTimedOut)
}
