"""The control plane's FastAPI app: `create_app(settings)`.

Run it with `uvicorn --factory api.main:create_app` (settings from the environment). The app builds
its engine, applies pending migrations and opens its blob store when created; nothing happens at
import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.blobstore import BlobStore
from api.bodylimit import BodyLimit
from api.calls.wiring import install_calls
from api.config import Settings
from api.db import engine_from_settings
from api.errors import ERROR_RESPONSES, install_error_handlers
from api.migrations import migrate
from api.routes import blobs, connections, health, keys, nodes, publishers, registry, routines, runs

BLOB_PREFIX = "/v1/actions/registry/blobs"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for these settings (default: from the environment)."""
    settings = settings or Settings()
    engine = engine_from_settings(settings)
    migrate(engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(title="b3os", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.engine = engine
    app.state.blobs = BlobStore(settings.resolved_blob_dir())
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, exempt_prefixes=(BLOB_PREFIX,))
    app.include_router(health.router)
    for module in (keys, publishers, blobs, registry, nodes, routines, runs, connections):
        app.include_router(module.router, responses=ERROR_RESPONSES)
    app.include_router(registry.resolve_router, responses=ERROR_RESPONSES)
    install_calls(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """OpenAPI with the one error body in place of FastAPI's 422 validation schema."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None and "400" not in responses:
                responses["400"] = {
                    "description": "invalid_request: the error body",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                }
    for name in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(name, None)
    app.openapi_schema = schema
    return schema
