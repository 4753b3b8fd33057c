"""Hook the call service and its routes into the api app: `install_calls(app)`."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from api.calls.service import CallService
from api.calls.settings import CallSettings
from api.errors import ERROR_RESPONSES
from api.models import utcnow
from api.routes import calls, earnings, mcp, usage


def install_calls(
    app: FastAPI, *, settings: CallSettings | None = None, clock: Callable[[], dt.datetime] = utcnow
) -> CallService:
    """Add the call service (`app.state.calls`) and the calls, MCP, usage and earnings routes."""
    service = CallService(
        engine=app.state.engine,
        settings=settings or CallSettings(),
        egress_url=app.state.settings.egress_url,
        egress_token=app.state.settings.egress_token,
        clock=clock,
    )
    app.state.calls = service
    for module in (calls, usage, earnings):
        app.include_router(module.router, responses=ERROR_RESPONSES)
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with outer(a) as state:
            try:
                yield state
            finally:
                await service.aclose()

    app.router.lifespan_context = lifespan
    mcp.install(app)  # its lifespan inside: the MCP server stops before the call service closes
    return service
