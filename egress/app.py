"""The egress proxy's ASGI app (Starlette), built by `create_app(settings)`.

```
GET  /healthz                -> {"ok": true}                      no auth
GET  /v1/egress/public-key   -> {"public_key": "<base64 raw 32>"} bearer B3OS_EGRESS_TOKEN
POST /v1/egress/fetch        -> 200 {...answer} | 200 {"error": {"reason", "message", "sent"}, "refreshed"}
POST /v1/egress/relay        -> the same, for a js call's fetch: authorized by its grant (egress.relay)
```

A wrong or missing token answers 401 `{"error": {"code": "unauthorized", "message"}}`; a body that
is not a fetch request answers 400 `{"error": {"code": "invalid_request", "message"}}`. Nothing
here logs a header, a body or a secret.
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import certifi
import httpcore
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from egress.config import EgressSettings
from egress.fetch import Fetcher
from egress.guard import GuardedBackend, Resolver
from egress.metrics import EgressMetrics
from egress.models import FetchRequest
from egress.oauth2 import TokenRefresher
from egress.relay import relay_answer
from egress.sealing import load_or_create_key, public_key_b64
from telemetry import logs, tracing
from telemetry.config import TelemetrySettings
from telemetry.scrape import install_metrics

log = logging.getLogger("b3os.egress")
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # a base64 body of 24 MiB and its envelope

Endpoint = Callable[[Request], Awaitable[Response]]


def make_ssl_context(settings: EgressSettings) -> ssl.SSLContext:
    """Verifying TLS context: the system roots, certifi's, and the operator's `ca_file` if set."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    if settings.ca_file is not None:
        context.load_verify_locations(cafile=str(settings.ca_file.expanduser()))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _problem(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(settings: EgressSettings, *, resolver: Resolver | None = None) -> Starlette:
    """Build the proxy: load (or make) its key, and its guarded connection pool.

    Args:
        settings: the proxy's settings.
        resolver: name resolution for the address guard (a test seam); getaddrinfo by default.
    """
    # httpcore's debug log prints request headers, credentials included: never let it.
    logging.getLogger("httpcore").setLevel(logging.INFO)
    telemetry = TelemetrySettings()
    tracing.setup("egress", telemetry)
    metrics = EgressMetrics()
    key = load_or_create_key(settings.resolved_key_file())
    public_key = public_key_b64(key)
    backend = GuardedBackend(connect_to=settings.connect_map(), resolver=resolver)
    pool = httpcore.AsyncConnectionPool(
        ssl_context=make_ssl_context(settings),
        network_backend=backend,
        max_connections=256,
        keepalive_expiry=30,
    )
    fetcher = Fetcher(pool, key, TokenRefresher(pool, key))
    expected = f"Bearer {settings.token.get_secret_value()}".encode()

    def authorized(endpoint: Endpoint) -> Endpoint:
        async def check(request: Request) -> Response:
            given = request.headers.get("authorization", "").encode("latin-1")
            if not hmac.compare_digest(given, expected):
                if request.url.path == "/v1/egress/fetch":
                    metrics.answered("unauthorized")
                return _problem(
                    401, "unauthorized", "a valid egress token is required (Authorization: Bearer)"
                )
            return await endpoint(request)

        return check

    async def healthz(request: Request) -> Response:
        """Liveness."""
        return JSONResponse({"ok": True})

    async def public_key_route(request: Request) -> Response:
        """The public key connection secrets are sealed to."""
        return JSONResponse({"public_key": public_key})

    async def fetch(request: Request) -> Response:
        """Make one outbound exchange for a declarative action."""
        started = time.perf_counter()
        response, outcome = await exchange(request)
        metrics.answered(outcome)
        metrics.seconds.observe(time.perf_counter() - started)
        return response

    async def exchange(request: Request) -> tuple[Response, str]:
        """The answer to one fetch request, and its outcome for the metrics."""
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_REQUEST_BYTES:
                message = f"the request is larger than {MAX_REQUEST_BYTES} bytes"
                return _problem(400, "invalid_request", message), "invalid_request"
        try:
            data: Any = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return _problem(400, "invalid_request", "the request body is not JSON"), "invalid_request"
        if not isinstance(data, dict):
            message = "the request body is not a JSON object"
            return _problem(400, "invalid_request", message), "invalid_request"
        try:
            fetch_request = FetchRequest.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "body"
            return _problem(400, "invalid_request", f"{field}: {first['msg']}"), "invalid_request"
        try:
            answer = await fetcher.fetch(fetch_request)
        except Exception as exc:  # its text could quote a header: log the type only
            log.error("egress fetch failed unexpectedly: %s", type(exc).__name__)
            return _problem(500, "internal", "the egress proxy failed unexpectedly"), "internal"
        error = answer.get("error")
        return JSONResponse(answer), str(error.get("reason")) if isinstance(error, dict) else "ok"

    async def relay(request: Request) -> Response:
        """One fetch of a js call, relayed by its node under the call's grant."""
        started = time.perf_counter()
        try:
            response, outcome = await relay_answer(request, fetcher, settings.token.get_secret_value())
        except Exception as exc:  # its text could quote a header: log the type only
            log.error("egress relay failed unexpectedly: %s", type(exc).__name__)
            response, outcome = _problem(500, "internal", "the egress proxy failed unexpectedly"), "internal"
        metrics.answered(outcome)
        metrics.seconds.observe(time.perf_counter() - started)
        return response

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        logs.install()  # here: uvicorn has set up its logging by now
        yield
        await pool.aclose()

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/v1/egress/public-key", authorized(public_key_route), methods=["GET"]),
            Route("/v1/egress/fetch", authorized(fetch), methods=["POST"]),
            Route("/v1/egress/relay", relay, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    tracing.install_server_spans(app)
    install_metrics(app, metrics.registry, token=telemetry.metrics_token.get_secret_value())
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.public_key = public_key
    app.state.pool = pool  # closed by the lifespan; in-process tests close it themselves
    return app
