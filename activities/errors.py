"""How an answer of `POST /v1/actions/call` becomes a Temporal activity outcome.

Every failure is an `ApplicationError` whose `type` is the error code and whose first detail is
`{"code", "reason", "message", "status", "attempt", "idempotency_key", ...}` (the api's own detail
fields kept), so the workflow can put the code, reason and sentence in the run's result, and the
history shows which key each failed attempt sent (a key is derived, never a secret).

    429, 503 (with Retry-After),
    409 idempotency_in_progress        retryable, next_retry_delay = Retry-After seconds exactly
    tool_failed / action_failed        retryable with the step's backoff (the api keeps no answer
      with retryable: true             under the key for it, so the retry runs the call again)
    other 5xx                          retryable with the step's backoff
    the api refused the connection     retryable after 1 s, as a wait: the request reached no api (one
                                       restarting, say), so nothing ran; not counted as a failed attempt
    other network errors to the api    retryable with the step's backoff
    400, 422, other 4xx,
    tool_failed not retryable,
    output_invalid, tool_timed_out,
    action_timed_out                   non_retryable=True (the api keeps that answer under the step's
                                       key: a retry would only get it again)
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Protocol

import httpx
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from b3os import retry_after_seconds
from http1.client import ConnectFailed

# An answer of the api is an expected outcome, not a bug: the worker logs it as one line (call_action),
# and the SDK logs a BENIGN failure without a traceback.
BENIGN = ApplicationErrorCategory.BENIGN

# Fields of the api's error body copied into the error details (never headers, never the request).
_DETAIL_FIELDS = (
    "exit_code",
    "signal",
    "tool_code",
    "tool_message",
    "retryable",
    "errors",
    "pack_error",
    "field",
    "connection",
    "upstream_status",
)


def problem_fields(status: int, body: Any) -> dict[str, Any]:
    """The code, reason, message and detail fields of an api error body.

    Accepts the error object at the top level or under `"error"`; the sentence may be `message`
    or `detail`.

    Args:
        status: The HTTP status of the answer.
        body: The decoded JSON body (anything).

    Returns:
        A dict with `code`, `reason`, `message`, `status` and any known detail fields.
    """
    err: dict[str, Any] = {}
    if isinstance(body, dict):
        inner = body.get("error")
        err = inner if isinstance(inner, dict) else body
    code = err.get("code") if isinstance(err.get("code"), str) else f"http_{status}"
    reason = err.get("reason") if isinstance(err.get("reason"), str) else None
    message = err.get("message") or err.get("detail") or err.get("title")
    if not isinstance(message, str) or not message:
        message = f"the api answered HTTP {status}"
    fields: dict[str, Any] = {"code": code, "reason": reason, "message": message, "status": status}
    for name in _DETAIL_FIELDS:
        if name in err:
            fields[name] = err[name]
    return fields


class HttpAnswer(Protocol):
    """An HTTP answer as httpx and http1 both give it."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Any: ...  # `.get(name)`, in any case

    def json(self) -> Any: ...


def error_for_response(response: HttpAnswer, *, attempt: int, key: str | None = None) -> ApplicationError:
    """The activity error for a non-2xx answer of the api, read from the HTTP response.

    Args:
        response: The api's answer (status, JSON body, `Retry-After`).
        attempt: The activity attempt that got this answer (kept in the details).
        key: The Idempotency-Key the attempt sent (kept in the details).

    Returns:
        The `ApplicationError` to raise (see `error_for_answer`).
    """
    try:
        body: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    return error_for_answer(
        response.status_code, body, response.headers.get("retry-after"), attempt=attempt, key=key
    )


def error_for_answer(
    status: int, body: Any, retry_after: str | None, *, attempt: int, key: str | None = None
) -> ApplicationError:
    """The activity error for a non-2xx answer of the api.

    Args:
        status: The HTTP status.
        body: The decoded JSON body (or None when it was not JSON).
        retry_after: The `Retry-After` header, when present.
        attempt: The activity attempt that got this answer (kept in the details).
        key: The Idempotency-Key the attempt sent (kept in the details).

    Returns:
        The `ApplicationError` to raise: retryable or not, with `next_retry_delay` from Retry-After.
    """
    fields = problem_fields(status, body)
    fields["attempt"] = attempt
    if key is not None:
        fields["idempotency_key"] = key
    code = fields["code"]
    delay = retry_after_seconds(retry_after)  # the SDK's one parser
    text = _sentence(fields)
    if status in (429, 503) or code == "idempotency_in_progress":
        if delay is not None:
            fields["retry_after"] = delay
        return ApplicationError(
            text,
            fields,
            type=code,
            next_retry_delay=timedelta(seconds=delay) if delay is not None else None,
            category=BENIGN,
        )
    if code in ("tool_failed", "action_failed"):
        retryable = fields.get("retryable") is True
        return ApplicationError(text, fields, type=code, non_retryable=not retryable, category=BENIGN)
    if code in ("output_invalid", "tool_timed_out", "action_timed_out") or 400 <= status < 500:
        return ApplicationError(text, fields, type=code, non_retryable=True, category=BENIGN)
    return ApplicationError(text, fields, type=code, category=BENIGN)


CONNECT_RETRY_S = 1.0
"""How long a step waits before it sends again a call whose api refused the connection."""


def is_wait(error: ApplicationError) -> bool:
    """Whether an error asks the step to wait and send the call again (429, 503, 409 in progress, an api
    that refused the connection)."""
    fields = error.details[0] if error.details and isinstance(error.details[0], dict) else {}
    if error.type == "api_unreachable":
        return fields.get("retry_after") is not None
    return fields.get("status") in (429, 503) or error.type == "idempotency_in_progress"


def network_error(exc: Exception, api_url: str, *, attempt: int) -> ApplicationError:
    """A retryable error for a call that did not reach the api or got no answer.

    Args:
        exc: The transport error.
        api_url: The api's base URL (it holds no secret).
        attempt: The activity attempt.

    Returns:
        A retryable `ApplicationError` with code `api_unreachable`.
    """
    detail = f": {exc}" if str(exc) else f" ({type(exc).__name__})"
    message = f"the api at {api_url} did not answer{detail}"
    fields: dict[str, Any] = {
        "code": "api_unreachable",
        "reason": type(exc).__name__,
        "message": message,
        "attempt": attempt,
    }
    if isinstance(exc, (httpx.ConnectError, ConnectFailed)):  # nothing reached the api: wait as for a 503
        fields["retry_after"] = CONNECT_RETRY_S
        delay = timedelta(seconds=CONNECT_RETRY_S)
        return ApplicationError(
            message, fields, type="api_unreachable", next_retry_delay=delay, category=BENIGN
        )
    return ApplicationError(message, fields, type="api_unreachable", category=BENIGN)


def _sentence(fields: dict[str, Any]) -> str:
    # The code is the error's type, which Temporal shows before this sentence.
    return f"{fields['reason']}: {fields['message']}" if fields.get("reason") else fields["message"]
