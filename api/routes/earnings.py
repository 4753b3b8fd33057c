"""`GET /v1/actions/publishers/{namespace}/earnings`: what a publisher's tools earned in a month."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Request
from sqlmodel import Session

from api.accounts.scopes import EARNINGS_READ
from api.calls.sales import earnings_report
from api.deps import Principal, require
from api.errors import error_responses
from api.params import Month, Namespace
from api.registry.publishers import own_publisher
from api.routes.usage import month_or_now

router = APIRouter(prefix="/v1/actions/publishers", tags=["earnings"])


@router.get("/{namespace}/earnings", responses=error_responses(400, 403, 404))
async def earnings(
    request: Request,
    namespace: Namespace,
    principal: Annotated[Principal, Depends(require(EARNINGS_READ))],
    month: Month = None,
) -> dict[str, Any]:
    """Calls, gross, B3OS's cut and net of a namespace's tools for a month, daily per tool (accrued)."""
    month = month_or_now(request, month)
    service = request.app.state.calls

    def read() -> dict[str, Any]:
        with Session(request.app.state.engine) as session:
            own_publisher(session, namespace=namespace, org_id=principal.org_id)
            return earnings_report(session, namespace=namespace, month=month, now=service.clock())

    result: dict[str, Any] = await anyio.to_thread.run_sync(read)
    return result
