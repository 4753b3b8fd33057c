"""Every error the SDK raises, under one root.

```
B3OSError
├── ConfigError               no api URL or no API key (argument or B3OS_API_URL / B3OS_API_KEY)
├── ConnectionFailed          the api could not be reached, or did not answer in time (`url`, `cause`,
│                             `idempotency_key`)
├── WaitTimedOut              `runs.wait` gave up before the run ended (`run_id`, `run`)
└── APIError                  the api answered an error: status, code, reason, message, retry_after, body
    ├── InvalidRequest        400 invalid_request (`field` names what is wrong)
    ├── Unauthorized          401 unauthorized
    ├── Forbidden             403 forbidden (`missing_scope`)
    ├── NotFound              404 not_found
    ├── Conflict              409 conflict, idempotency_in_progress (retried after Retry-After)
    ├── PayloadTooLarge       413 payload_too_large
    ├── IdempotencyKeyReused  422 idempotency_key_reused (the key was sent with another request)
    ├── RateLimited           429 rate_limited, concurrency_limited, quota_exceeded (retried)
    └── ServerError           5xx (500 internal, and any other the classes below do not name)
        ├── ActionFailed      502 tool_failed, action_failed (`retryable`, `pack_error`, ...)
        ├── Unavailable       503 unavailable, tool_, pack_, action_unavailable (retried)
        └── TimedOut          504 tool_timed_out, action_timed_out
```

An `APIError` is built from the api's one error body, `{"error": {"code", "message", "reason"?, ...}}`;
`str(error)` is the api's sentence with its status and code: `input.text: 5 is not of type 'string'
(400 invalid_request)`. The error object's other fields (`field`, `missing_scope`, `retryable`,
`pack_error`, `call_id`, `cost`, ...) are in `error.body`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from b3os.retry_after import retry_after_seconds


class B3OSError(Exception):
    """The root of every error of the SDK."""


class ConfigError(B3OSError):
    """The client lacks its api URL or its API key."""


class ConnectionFailed(B3OSError):
    """The api could not be reached, or did not answer in time; nothing was read from it.

    After a timeout the api may have done what was asked (run a call, started a run): send the request
    again with `idempotency_key` (`actions.call(..., idempotency_key=exc.idempotency_key)`) and it is the
    same request, answered from the first one, run and billed once.

    Attributes:
        url: The api's base URL.
        cause: The transport error's class name (`ConnectError`, `ReadTimeout`, ...).
        idempotency_key: The `Idempotency-Key` the request was sent with (given, or the one the client
            made for it), or None for a request that carries none.
    """

    def __init__(self, url: str, cause: str, *, idempotency_key: str | None = None) -> None:
        self.url = url
        self.cause = cause
        self.idempotency_key = idempotency_key
        if cause.endswith("Timeout") and cause not in ("ConnectTimeout", "PoolTimeout"):
            super().__init__(f"The api at {url} did not answer in time ({cause})")
        else:
            super().__init__(f"Cannot reach the api at {url} ({cause})")


class WaitTimedOut(B3OSError):
    """A run was still running when `runs.wait` reached its `timeout_s`.

    Attributes:
        run_id: The run waited for.
        run: The run as last read (`status` is still `running`).
    """

    def __init__(self, run_id: str, run: dict[str, Any], timeout_s: float) -> None:
        self.run_id = run_id
        self.run = run
        super().__init__(f"run {run_id} was still running after {timeout_s:g} s")


class APIError(B3OSError):
    """An error answer of the api.

    Attributes:
        status: The HTTP status.
        code: The error's stable code (`invalid_request`, `rate_limited`, ...), or None when the body
            was not the api's error shape.
        reason: The finer reason some codes carry (`connection_missing`, `upstream`, ...), or None.
        message: The api's sentence.
        retry_after: Seconds to wait before sending the request again (the `Retry-After` header, else
            the body's `retry_after`), or None.
        body: The error object (`{"code", "message", ...}`); {} when the answer had none.
        headers: The answer's headers.
    """

    def __init__(
        self,
        status: int,
        *,
        code: str | None,
        message: str,
        reason: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body: dict[str, Any] = dict(body or {})
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(f"{message} ({status} {code})" if code else message)


class InvalidRequest(APIError):
    """400: the request is wrong; `field` names what."""


class Unauthorized(APIError):
    """401: no key, an unknown key or a revoked key."""


class Forbidden(APIError):
    """403: the key lacks a scope (`missing_scope`) or the organization a right."""


class NotFound(APIError):
    """404: absent, or another organization's."""


class Conflict(APIError):
    """409: already exists, immutable, ended; or the Idempotency-Key's first request still runs."""


class PayloadTooLarge(APIError):
    """413: the body is larger than the api takes."""


class IdempotencyKeyReused(APIError):
    """422: the Idempotency-Key was already sent with another request."""


class RateLimited(APIError):
    """429: a rate, concurrency or quota limit; wait `retry_after` seconds."""


class ServerError(APIError):
    """5xx the other classes do not name (500 internal)."""


class ActionFailed(ServerError):
    """502: the tool or the upstream failed (`reason`; `retryable` says whether trying again may help)."""


class Unavailable(ServerError):
    """503: the api, a node, the pack or the upstream cannot serve now; wait `retry_after` seconds."""


class TimedOut(ServerError):
    """504: the tool or the upstream did not finish within the call's time."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
    502: ActionFailed,
    503: Unavailable,
    504: TimedOut,
}


def error_class(status: int, code: str | None) -> type[APIError]:
    """The class of an error answer, by its status (and code where a status holds several kinds)."""
    if status == 422 and code == "idempotency_key_reused":
        return IdempotencyKeyReused
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return ServerError if status >= 500 else APIError


def api_error(status: int, reason_phrase: str, headers: Mapping[str, str], body: Any) -> APIError:
    """The typed error of an error answer.

    Args:
        status: The HTTP status.
        reason_phrase: The status's phrase (`Bad Gateway`), for a body without a sentence.
        headers: The answer's headers (`Retry-After` is read from them, case-insensitively).
        body: The decoded JSON body, or None when it was not JSON.

    Returns:
        An instance of the class `error_class` names, carrying the body's fields.
    """
    inner = body.get("error") if isinstance(body, dict) else None
    detail: dict[str, Any] = inner if isinstance(inner, dict) else {}
    code = detail.get("code") if isinstance(detail.get("code"), str) else None
    message = detail.get("message")
    if not isinstance(message, str) or not message:
        message = f"The api answered {status} {reason_phrase}."
    reason = detail.get("reason") if isinstance(detail.get("reason"), str) else None
    lowered = {k.lower(): v for k, v in headers.items()}
    retry_after = retry_after_seconds(lowered.get("retry-after"))
    if retry_after is None and isinstance(detail.get("retry_after"), int | float):
        retry_after = max(float(detail["retry_after"]), 0.0)
    return error_class(status, code)(
        status,
        code=code,
        message=message,
        reason=reason,
        retry_after=retry_after,
        body=detail,
        headers=headers,
    )
