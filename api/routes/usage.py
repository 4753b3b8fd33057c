"""`GET /v1/usage`: an organization's own metered usage and cost for one month."""

from __future__ import annotations

import re
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Request
from sqlmodel import Session

from api.accounts.scopes import USAGE_READ
from api.calls import metering
from api.calls.earnings import month_bounds
from api.deps import Principal, require
from api.errors import InvalidRequest, error_responses
from api.params import MONTH_PATTERN, Month

router = APIRouter(prefix="/v1", tags=["usage"])


def month_or_now(request: Request, month: str | None) -> str:
    """The month asked for, or the service clock's current month (`YYYY-MM`)."""
    if month is None:
        return str(request.app.state.calls.clock().strftime("%Y-%m"))
    if re.fullmatch(MONTH_PATTERN, month) is None:
        raise InvalidRequest(
            f"The field month is invalid: {month[:20]!r} is not a month YYYY-MM from 1000-01 to 2999-12.",
            field="month",
        )
    month_bounds(month)
    return month


@router.get("/usage", responses=error_responses(400, 403))
async def usage(
    request: Request,
    principal: Annotated[Principal, Depends(require(USAGE_READ))],
    month: Month = None,
) -> dict[str, Any]:
    """Your organization's units, calls and cost in micro-USD for a month (default: this month)."""
    month = month_or_now(request, month)

    def read() -> dict[str, Any]:
        with Session(request.app.state.engine) as session:
            return metering.usage(session, org_id=principal.org_id, month=month)

    body = await anyio.to_thread.run_sync(read)
    return {"org_id": principal.org_id, "month": month, "unit": "micro-USD", **body}
