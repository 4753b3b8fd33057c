"""The control plane's one error tree and its mapping to HTTP.

```
ApiError                      code, status, message, extra fields, headers
├── InvalidRequest            400 invalid_request (a field or value is wrong; `field` names it)
│   └── BodyNotJson           the body is not JSON at all (api.jsonbody, which sets every JSON body's limits)
├── Unauthorized              401 unauthorized (no key, unknown key, revoked key)
├── Forbidden                 403 forbidden (the key lacks a scope, or the org lacks a right)
├── NotFound                  404 not_found (absent, or another organization's)
├── Conflict                  409 conflict (already exists; immutable)
├── PayloadTooLarge           413 payload_too_large
├── ServiceUnavailable        503 unavailable (with Retry-After)
└── CallError                 reason, details, retry_after (whole seconds, also as Retry-After)
    ├── RateLimited           429 rate_limited (with `limit` for the api's own limits)
    └── ...                   the call path's errors (api.calls.errors)
```

Every error answers `{"error": {"code", "message", ...extra}}`; a `CallError` carries `reason`, its
details and `retry_after` there. Every 429 carries `Retry-After`: whole seconds, rounded up, at least 1
(`whole_seconds`), the same number as the body's `retry_after`. `install_error_handlers` maps this
tree, FastAPI's validation errors, Starlette's HTTP errors, a database that cannot be reached (503
`unavailable`, reason `database`, with Retry-After: the transaction was rolled back, try again) and
anything unexpected (500, with no detail) in one place.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import compile_path

if TYPE_CHECKING:  # FastAPI itself is imported by the api only: a checker imports this tree too (~0.5 s)
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError

log = logging.getLogger("b3os.api")


def whole_seconds(seconds: float) -> int:
    """Round a delay up to whole seconds, at least 1 (a `Retry-After` of 0 would invite a busy loop)."""
    return max(1, math.ceil(seconds - 1e-9))


class ApiError(Exception):
    """The root of every error the api answers with."""

    code = "internal"
    status = 500

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The JSON body of this error."""
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


class InvalidRequest(ApiError):
    code = "invalid_request"
    status = 400


class Unauthorized(ApiError):
    code = "unauthorized"
    status = 401


class Forbidden(ApiError):
    code = "forbidden"
    status = 403


class NotFound(ApiError):
    code = "not_found"
    status = 404


class Conflict(ApiError):
    code = "conflict"
    status = 409


class PayloadTooLarge(ApiError):
    code = "payload_too_large"
    status = 413


class ServiceUnavailable(ApiError):
    """503 unavailable, with `Retry-After` (whole seconds, at least 1) as its header only."""

    code = "unavailable"
    status = 503

    def __init__(self, message: str, *, retry_after_s: float, **kwargs: Any) -> None:
        super().__init__(message, headers={"Retry-After": str(whole_seconds(retry_after_s))}, **kwargs)


class CallError(ApiError):
    """An error with structured fields: a status, a code, a sentence, its reason and details, and when to
    try again (the call path's root, api.calls.errors, and the api's limits')."""

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


class RateLimited(CallError):
    """429 rate_limited: a limit of starts in a window (calls, runs, keys, failed authentications) or an
    upstream's 429 (reason `upstream`); `limit_kind` names the limit for the metrics when it is ours."""

    status = 429
    code = "rate_limited"
    limit_kind: str | None = None


class ErrorDetail(BaseModel):
    """The error object: a stable code and one sentence; some codes add fields."""

    model_config = ConfigDict(extra="allow")
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error response has this shape."""

    error: ErrorDetail


_STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "unavailable",
}


def error_response(err: ApiError) -> JSONResponse:
    """The HTTP response of one error."""
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] if parts[0] == "body" else parts
    return ".".join(parts) or "body"


def validation_message(errors: list[Any]) -> tuple[str, str]:
    """(field, sentence) for the first of FastAPI's validation errors."""
    first: dict[str, Any] = dict(errors[0]) if errors else {"loc": ("body",), "msg": "is invalid", "type": ""}
    field = _field_path(first.get("loc", ("body",)))
    kind = first.get("type", "")
    if kind == "json_invalid":
        ctx = first.get("ctx") or {}
        return "body", f"The request body is not valid JSON ({ctx.get('error', 'malformed')})."
    if kind == "extra_forbidden":
        return field, f"The field {field} is not accepted here."
    if kind == "missing":
        return field, f"The field {field} is required."
    value = first.get("input")
    shown = repr(value) if isinstance(value, str | int | float | bool) and len(repr(value)) <= 80 else None
    tail = f" (got {shown})" if shown is not None else ""
    return field, f"The field {field} is invalid: {first.get('msg', 'invalid value')}{tail}."


Refused = Callable[[ApiError, str | None], None]
"""Told of each 429 the handler answers, with its route's path (the metrics count them, api.metrics)."""


def _api_error(refused: Refused) -> Callable[[Request, Exception], Any]:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        if exc.status == 429:
            refused(exc, getattr(request.scope.get("route"), "path", None))
        return error_response(exc)

    return handle


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    errors = list(cast("RequestValidationError", exc).errors())
    field, message = validation_message(errors)
    return error_response(InvalidRequest(message, field=field))


def _allowed_methods(request: Request, route_allows: str) -> str:
    """Every method the API documents for the request's path (Starlette's 405 names one route's only), else
    those of the route (`route_allows`: a page outside the document, such as /docs); HEAD wherever GET is
    (api.head answers it)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(request.url.path):
            methods |= {method.upper() for method in operations}
    if not methods:
        methods = {method.strip().upper() for method in route_allows.split(",") if method.strip()}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "internal")
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = "There is no such endpoint."
    elif exc.status_code == 405:
        message = "This endpoint does not accept that method."
        headers["Allow"] = _allowed_methods(request, headers.get("Allow", ""))
    else:
        message = str(exc.detail) if exc.detail else "The request was refused."
    if not message.endswith("."):
        message += "."
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


DATABASE_RETRY_AFTER_S = 2
"""Retry-After of a request whose database could not be reached (a restart or failover takes seconds)."""


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    # one line, no traceback: the driver's text may name hosts, and the cause is outside this process
    log.warning(
        "the database could not be reached (%s %s): %s", request.method, request.url.path, type(exc).__name__
    )
    message = "The database cannot be reached at the moment; try again after Retry-After."
    return error_response(
        ServiceUnavailable(message, retry_after_s=DATABASE_RETRY_AFTER_S, reason="database")
    )


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=exc)
    body = {"error": {"code": "internal", "message": "The server failed to answer this request."}}
    return JSONResponse(body, status_code=500)


def install_error_handlers(app: FastAPI, *, refused: Refused) -> None:
    """Map the error tree and framework errors to the one error body; `refused` is told of each 429."""
    # lazily: FastAPI is imported by the api only, and a checker process imports this tree too (~0.5 s)
    from fastapi.exceptions import RequestValidationError

    app.add_exception_handler(ApiError, _api_error(refused))
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OperationalError, _database_unavailable)  # connection refused, lost, shut down
    app.add_exception_handler(InterfaceError, _database_unavailable)  # a connection closed under the driver
    app.add_exception_handler(Exception, _unexpected)


_ERROR_DESCRIPTIONS = {
    400: "invalid_request: a field or value is wrong (`field` names it)",
    401: "unauthorized: no key, an unknown key or a revoked key",
    403: "forbidden: the key lacks a scope (`missing_scope`) or the organization a right",
    404: "not_found: there is none, or it is another organization's",
    409: "conflict: it exists already, or it has already ended",
    413: "payload_too_large: the body is over the limit (`limit_bytes`)",
    422: "idempotency_key_reused: the Idempotency-Key was sent before with another request",
    429: "rate_limited, concurrency_limited or quota_exceeded: try again after Retry-After seconds",
    502: "tool_failed or action_failed: the tool or the upstream failed (`reason`)",
    503: "unavailable, tool_unavailable, pack_unavailable or action_unavailable: try again after Retry-After",
    504: "tool_timed_out or action_timed_out: the call ran out of time",
}
RETRY_AFTER = "Retry-After"
_RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": "whole seconds to wait before sending the request again (at least 1)",
    "schema": {"type": "integer", "minimum": 1},
}


def error_responses(
    *statuses: int, notes: dict[int, str] | None = None, retry_after: tuple[int, ...] = (429, 503)
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of these error statuses, each with the one error body.

    Args:
        statuses: the error statuses a route can answer.
        notes: a route's own description of a status, in place of the general one.
        retry_after: the statuses that always carry `Retry-After` (declared as a required header).
    """
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "model": ErrorBody,
            "description": (notes or {}).get(status, _ERROR_DESCRIPTIONS.get(status, "the error body")),
        }
        if status in retry_after:
            response["headers"] = {RETRY_AFTER: {**_RETRY_AFTER_HEADER, "required": True}}
        responses[status] = response
    return responses


# What every route of a router that needs a key can answer; each route adds its own (error_responses).
ERROR_RESPONSES = error_responses(401)
