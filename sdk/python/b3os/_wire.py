"""The one implementation both clients share: settings, a request as data, its HTTP form, and the
judgement of each answer (a value, a typed error, or a wait before sending the same request again).

`B3OS` and `AsyncB3OS` differ only in how they send and sleep; everything else is here, so the two
can never disagree on a header, a retry or an error.
"""

from __future__ import annotations

import dataclasses
import json as jsonlib
import os
import ssl
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

from b3os._tracing import inject as inject_trace
from b3os.errors import APIError, ConfigError, ConnectionFailed, api_error

VERSION = "0.1.0"  # b3os.__version__
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
DEFAULT_MAX_RETRIES = 5
DEFAULT_MAX_RETRY_WAIT_S = 120.0
RETRIED_STATUSES = (429, 503)


@dataclass(frozen=True)
class Retry:
    """What `on_retry` is told before the client waits and sends a request again.

    Attributes:
        attempt: Which retry this is (1 for the first).
        max_retries: The most retries the client makes.
        wait_s: The seconds it now waits: the answer's `Retry-After`, exactly.
        error: The answer that asked for the wait (`RateLimited`, `Unavailable` or `Conflict`).
        method: The request's method.
        path: The request's path.
        idempotency_key: The `Idempotency-Key` the request is sent again with, or None.
    """

    attempt: int
    max_retries: int
    wait_s: float
    error: APIError
    method: str
    path: str
    idempotency_key: str | None


@dataclass(frozen=True)
class Options:
    """A client's settings (`B3OS.with_options` makes a copy with some changed)."""

    api_url: str
    api_key: str = field(repr=False)
    timeout: float | httpx.Timeout | None  # None: the http client's own
    max_retries: int
    max_retry_wait_s: float
    on_retry: Callable[[Retry], Any] | None


def make_options(
    api_url: str | None,
    api_key: str | None,
    *,
    timeout: float | httpx.Timeout | None,
    max_retries: int,
    max_retry_wait_s: float,
    on_retry: Callable[[Retry], Any] | None,
    environ: Mapping[str, str] | None = None,
) -> Options:
    """The settings of a new client: arguments first, then B3OS_API_URL and B3OS_API_KEY.

    Raises:
        ConfigError: no URL or no key was given or set, or a retry setting is negative.
    """
    env = os.environ if environ is None else environ
    url = (api_url or env.get("B3OS_API_URL") or "").strip().rstrip("/")
    key = (api_key or env.get("B3OS_API_KEY") or "").strip()
    if not url:
        raise ConfigError("No api URL: pass api_url= or set B3OS_API_URL (such as http://127.0.0.1:8700).")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"The api URL {url!r} is not http:// or https://.")
    if not key:
        raise ConfigError("No API key: pass api_key= or set B3OS_API_KEY.")
    if max_retries < 0 or max_retry_wait_s < 0:
        raise ConfigError("max_retries and max_retry_wait_s must not be negative.")
    return Options(url, key, timeout, max_retries, max_retry_wait_s, on_retry)


UNSET: Any = object()
"""A `with_options` argument left as it was."""


def changed(options: Options, **changes: Any) -> Options:
    """`options` with the changes that are not UNSET.

    Raises:
        ConfigError: a retry setting would be negative.
    """
    new = dataclasses.replace(options, **{k: v for k, v in changes.items() if v is not UNSET})
    if new.max_retries < 0 or new.max_retry_wait_s < 0:
        raise ConfigError("max_retries and max_retry_wait_s must not be negative.")
    return new


@dataclass(frozen=True)
class ApiRequest:
    """One logical request: built once, sent once plus once per retry, always with the same key.

    Attributes:
        method: The HTTP method.
        path: The path, each segment already percent-encoded (`segment`).
        params: The query parameters (None values are left out).
        json: The JSON body, or None.
        content: A raw body (sent as application/octet-stream), or None.
        idempotency_key: The `Idempotency-Key` header, or None.
        expect: `json` (the answer's JSON), `empty` (None; 204) or `exists` (True on 2xx, False on 404).
        unwrap: The key of the answer's object to return (`packs` of `{"packs": [...]}`), or None.
    """

    method: str
    path: str
    params: Mapping[str, str | int | float | None] | None = None
    json: Any = None
    content: bytes | None = None
    idempotency_key: str | None = None
    expect: Literal["json", "empty", "exists"] = "json"
    unwrap: str | None = None


def segment(value: str) -> str:
    """One path segment, percent-encoded so that no `/`, `?`, `#` or dot segment in it changes the path."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def new_idempotency_key() -> str:
    """A fresh key for one logical request that was given none, so its retries are the same request."""
    return f"b3os-sdk-{uuid.uuid4().hex}"


def tls_for(api_url: str) -> ssl.SSLContext | bool:
    """What the client's own `httpx` client verifies TLS with: for an https api, the system's trusted
    certificates (httpx's default); for a plain http api, a context that trusts nothing, since every
    request goes to the api URL and no TLS is spoken (loading the certificates costs ~50 ms of CPU per
    client, a fifth of a CLI command's time; a request to https from it would fail, never go unverified).
    """
    if api_url.lower().startswith("http://"):
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return True


def http_arguments(options: Options, request: ApiRequest) -> dict[str, Any]:
    """The keyword arguments of `httpx.Client.request` (and the async one) for a request."""
    headers = {
        "Authorization": f"Bearer {options.api_key}",
        "Accept": "application/json",
        "User-Agent": f"b3os-python/{VERSION}",
    }
    if request.idempotency_key is not None:
        headers["Idempotency-Key"] = request.idempotency_key
    inject_trace(headers)
    arguments: dict[str, Any] = {
        "method": request.method,
        "url": options.api_url + request.path,
        "headers": headers,
    }
    if options.timeout is not None:
        arguments["timeout"] = options.timeout
    if request.params:
        arguments["params"] = {k: str(v) for k, v in request.params.items() if v is not None}
    if request.content is not None:
        headers["Content-Type"] = "application/octet-stream"
        arguments["content"] = request.content
    elif request.json is not None:
        headers["Content-Type"] = "application/json"
        arguments["content"] = jsonlib.dumps(request.json, separators=(",", ":"), allow_nan=False).encode()
    return arguments


def connection_failed(options: Options, request: ApiRequest, exc: httpx.TransportError) -> ConnectionFailed:
    """The error of a request that never got an answer (with the Idempotency-Key it was sent with)."""
    return ConnectionFailed(options.api_url, type(exc).__name__, idempotency_key=request.idempotency_key)


@dataclass(frozen=True)
class Done:
    """The request succeeded: `value` is what the method returns."""

    value: Any


def judge(options: Options, request: ApiRequest, response: httpx.Response, retries: int) -> Done | Retry:
    """What an answer means: the method's value, a wait before the same request goes again, or an error.

    A 429 or 503 with a `Retry-After`, and a 409 `idempotency_in_progress` (the key's first request still
    runs), are sent again after exactly `Retry-After` while fewer than `max_retries` retries were made and
    the wait is at most `max_retry_wait_s`; any other error answer is raised at once.

    Args:
        options: The client's settings.
        request: The request answered.
        response: The answer (already read).
        retries: How many retries of this request were made so far.

    Raises:
        APIError: the answer is an error that is not retried (or no longer).
    """
    status = response.status_code
    if request.expect == "exists" and status == 404:
        return Done(False)
    if 200 <= status < 300:
        if request.expect == "exists":
            return Done(True)
        if request.expect == "empty" or status == 204 or not response.content:
            return Done(None)
        value = response.json()
        return Done(value[request.unwrap] if request.unwrap is not None else value)
    error = api_error(status, response.reason_phrase, response.headers, _json_or_none(response))
    wait = error.retry_after
    retried = status in RETRIED_STATUSES or (status == 409 and error.code == "idempotency_in_progress")
    if not retried or wait is None or retries >= options.max_retries or wait > options.max_retry_wait_s:
        raise error
    return Retry(
        attempt=retries + 1,
        max_retries=options.max_retries,
        wait_s=wait,
        error=error,
        method=request.method,
        path=request.path,
        idempotency_key=request.idempotency_key,
    )


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
