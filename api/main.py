"""The control plane's FastAPI app: `create_app(settings)`.

Run it with `uvicorn --factory api.main:create_app --http http1.server:BoundedHttp` (settings from the
environment; the protocol bounds what a client may make it hold, http1/server.py). The app builds
its engine, applies pending migrations and opens its blob store when created; nothing happens at
import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import metrics
from api.accounts.auth_limit import AuthLimiter
from api.bodylimit import BodyLimit
from api.calls.wiring import install_calls
from api.checker import Checkers
from api.config import Settings
from api.db import engine_from_settings
from api.docs import install_docs
from api.errors import ERROR_RESPONSES, install_error_handlers
from api.head import HeadAsGet
from api.jsonbody import JsonGuard
from api.metrics import REGISTRY
from api.migrations import migrate
from api.openapi import openapi_document
from api.registry.blobs import open_blob_store
from api.routes import (
    blobs,
    connections,
    health,
    keys,
    nodes,
    publishers,
    registry,
    routines,
    runs,
    schedules,
    triggers,
)
from api.services import services_of
from http1.server import limits as http_limits
from telemetry import arenas, interpreter, logs, tracing
from telemetry.config import TelemetrySettings
from telemetry.scrape import install_metrics

BLOB_PREFIX = "/v1/actions/registry/blobs"

STOP_S = 10.0
"""How long a stopping api waits for the trigger deliveries' round under way (then cancels it)."""


@functools.cache
def _settle_heap() -> None:
    """Import what a first run start and a first call would, then freeze the heap built so far out of the
    garbage collector: a full collection of the ~240,000 objects of a started api took 80-300 ms, holding
    every request (the slowest `/healthz` answers under load); it now scans only what came later. Once per
    process (a test process that makes many apps freezes its heap once), known by the cache rather than
    by `gc.get_freeze_count()`, which walks every frozen object."""
    import engine.worker  # noqa: F401  (the Temporal client's modules: imported on the first run start)
    from api.calls import http_action, vm  # noqa: F401

    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for these settings (default: from the environment)."""
    settings = settings or Settings()
    http_limits()  # a bad B3OS_HTTP_ setting stops the start here, not each connection
    interpreter.hand_over_often()
    arenas.few_arenas()  # before the worker threads allocate
    telemetry = TelemetrySettings()
    tracing.setup("api", telemetry)
    engine = engine_from_settings(settings)
    migrate(engine)

    @asynccontextmanager
    async def lifespan(started: FastAPI) -> AsyncIterator[None]:
        logs.install()  # here: uvicorn has set up its logging by now
        _settle_heap()
        # trigger events stored before (this api restarted, a start past the limits) start from here on
        deliveries = services_of(started.state).deliveries
        starter = asyncio.create_task(deliveries.run_forever())
        trimming = asyncio.create_task(arenas.giving_back())  # a burst's freed memory back to the system
        yield
        trimming.cancel()
        # its round ends first: cancelled, a round's thread would hold a connection past the engine's end
        deliveries.stop()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(starter, timeout=STOP_S)
        started.state.health.close()
        engine.dispose()

    app = FastAPI(
        title="b3os",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        **tracing.fastapi_options(),
    )
    app.state.settings = settings
    app.state.auth_limiter = AuthLimiter(failures_per_minute=settings.auth_failures_per_minute)
    app.state.engine = engine
    app.state.checkers = Checkers(
        engine.url.render_as_string(hide_password=False),
        routine_s=settings.routine_check_s,
        manifest_s=settings.manifest_check_s,
        first_party=tuple(n.strip() for n in settings.first_party_namespaces.split(",") if n.strip()),
    )
    app.state.health = health.DatabaseProbe(engine)
    blob_dir = settings.resolved_blob_dir()
    app.state.blobs = open_blob_store(settings.blob_store, blob_dir=blob_dir, engine=engine)
    install_error_handlers(app, refused=metrics.refused_request)
    app.add_middleware(HeadAsGet, routes=app.router.routes)  # innermost: only the routes see GET
    # inside BodyLimit: sizes are checked first; a webhook's body is read as sent (its signature is over it)
    app.add_middleware(JsonGuard, exempt_prefixes=(BLOB_PREFIX, triggers.HOOK_PATH))
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, exempt_prefixes=(BLOB_PREFIX,))
    app.include_router(health.router)
    # first after health: a request's route is found by trying the routes in order, and the calls'
    # path was 90 us into them at the end (~5% of the api's CPU a call)
    install_calls(app)
    for module in (
        keys,
        publishers,
        blobs,
        registry,
        nodes,
        routines,
        schedules,
        runs,
        connections,
        triggers,
    ):
        app.include_router(module.router, responses=ERROR_RESPONSES)
    app.include_router(schedules.ticks, responses=ERROR_RESPONSES)
    app.include_router(triggers.hooks, responses=ERROR_RESPONSES)
    app.include_router(triggers.polling, responses=ERROR_RESPONSES)
    app.include_router(registry.resolve_router, responses=ERROR_RESPONSES)
    install_docs(app)
    tracing.install_server_spans(app)  # outside the body limits: a refused request is traced too
    install_metrics(app, REGISTRY, token=telemetry.metrics_token.get_secret_value())
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    return app
