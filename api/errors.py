"""The control plane's one error tree and its mapping to HTTP.

```
ApiError                      code, status, message, extra fields, headers
├── InvalidRequest            400 invalid_request (a field or value is wrong; `field` names it)
├── Unauthorized              401 unauthorized (no key, unknown key, revoked key)
├── Forbidden                 403 forbidden (the key lacks a scope, or the org lacks a right)
├── NotFound                  404 not_found (absent, or another organization's)
├── Conflict                  409 conflict (already exists; immutable)
├── PayloadTooLarge           413 payload_too_large
├── RateLimited               429 rate_limited (with Retry-After)
└── ServiceUnavailable        503 unavailable (with Retry-After)
```

Every error answers `{"error": {"code", "message", ...extra}}`. `install_error_handlers` maps this
tree, FastAPI's validation errors, Starlette's HTTP errors and anything unexpected (500, with no
detail) in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("b3os.api")


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


class _RetryAfterError(ApiError):
    def __init__(self, message: str, *, retry_after_s: int, **kwargs: Any) -> None:
        headers = {"Retry-After": str(max(1, int(retry_after_s)))}
        super().__init__(message, headers=headers, **kwargs)


class RateLimited(_RetryAfterError):
    code = "rate_limited"
    status = 429


class ServiceUnavailable(_RetryAfterError):
    code = "unavailable"
    status = 503


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


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    field, message = validation_message(errors)
    return error_response(InvalidRequest(message, field=field))


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "internal")
    if exc.status_code == 404:
        message = "There is no such endpoint."
    elif exc.status_code == 405:
        message = "This endpoint does not accept that method."
    else:
        message = str(exc.detail) if exc.detail else "The request was refused."
    if not message.endswith("."):
        message += "."
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=exc.status_code, headers=exc.headers
    )


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=exc)
    body = {"error": {"code": "internal", "message": "The server failed to answer this request."}}
    return JSONResponse(body, status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Map the error tree and framework errors to the one error body."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": f"{code}: the error body"}
    for status, code in [
        (400, "invalid_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (413, "payload_too_large"),
    ]
}
