"""Errors of an action call: subclasses of the api's `ApiError`, so its one handler answers them.

    ApiError (api.errors)
    └── CallError                   reason, details, retry_after (whole seconds, also as Retry-After)
        ├── CallInvalid             400 invalid_request (with `errors`: path and message each)
        ├── RefNotFound             404 not_found (names the ref)
        ├── IdempotencyInProgress   409 idempotency_in_progress
        ├── BodyTooLarge            413 payload_too_large
        ├── IdempotencyKeyReused    422 idempotency_key_reused
        ├── RateLimited             429 rate_limited
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

import math
from typing import Any

from api.errors import ApiError


def whole_seconds(seconds: float) -> int:
    """Round a delay up to whole seconds, at least 1 (a `Retry-After` of 0 would invite a busy loop)."""
    return max(1, math.ceil(seconds - 1e-9))


class CallError(ApiError):
    """The root of the call errors: a status, a code, a sentence and structured details."""

    code = "internal"
    status = 500

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.reason = reason
        self.retry_after = None if retry_after is None else whole_seconds(retry_after)
        self.details = dict(details or {})
        extra: dict[str, Any] = {}
        if reason is not None:
            extra["reason"] = reason
        extra.update(self.details)
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            extra["retry_after"] = self.retry_after
            headers["Retry-After"] = str(self.retry_after)
        super().__init__(message, headers=headers, **extra)

    @property
    def detail(self) -> dict[str, Any]:
        """The inner error object: `{"code", "message", ...}`."""
        inner: dict[str, Any] = self.body()["error"]
        return inner


class CallInvalid(CallError):
    status = 400
    code = "invalid_request"


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


class RateLimited(CallError):
    status = 429
    code = "rate_limited"


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
