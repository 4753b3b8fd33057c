"""`GET /v1/usage`: an organization's own metered usage and cost for one month."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request
from sqlmodel import Session

from api.calls import metering
from api.calls.earnings import month_bounds
from api.deps import PrincipalDep
from api.errors import InvalidRequest

router = APIRouter(prefix="/v1", tags=["usage"])


def month_or_now(request: Request, month: str | None) -> str:
    """The month asked for, or the service clock's current month (`YYYY-MM`)."""
    if month is None:
        return str(request.app.state.calls.clock().strftime("%Y-%m"))
    try:
        month_bounds(month)
    except ValueError as exc:
        raise InvalidRequest(f"The field month is invalid: {exc}.", field="month") from None
    return month


@router.get("/usage")
async def usage(
    request: Request,
    principal: PrincipalDep,
    month: Annotated[str | None, Query(max_length=7)] = None,
) -> dict[str, Any]:
    """Your organization's units, calls and cost in micro-USD for a month (default: this month)."""
    month = month_or_now(request, month)
    start, end = month_bounds(month)

    def read() -> dict[str, Any]:
        with Session(request.app.state.engine) as session:
            return metering.usage(session, org_id=principal.org_id, start=start, end=end)

    body = await anyio.to_thread.run_sync(read)
    return {"org_id": principal.org_id, "month": month, "unit": "micro-USD", **body}
