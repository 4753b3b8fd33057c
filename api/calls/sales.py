"""A publisher's sales read from the meter events, for its monthly earnings report."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from api.calls.earnings import FREE_SALES_MICROUSD, Sale, month_bounds, monthly_report
from api.calls.metering import PUBLISHER_MICROUSD
from api.calls.tables import MeterEvent


def _of(namespace: str) -> tuple[Any, Any]:
    return (col(MeterEvent.publisher) == namespace, col(MeterEvent.unit) == PUBLISHER_MICROUSD)


def earnings_report(session: Session, *, namespace: str, month: str, now: dt.datetime) -> dict[str, Any]:
    """The earnings of a publisher namespace for a `YYYY-MM` month (see `api.calls.earnings`).

    Raises:
        ValueError: `month` is not `YYYY-MM`.
    """
    start, end = month_bounds(month)
    first = session.exec(select(func.min(MeterEvent.at)).where(*_of(namespace))).one()
    sold_before = int(
        session.exec(
            select(func.coalesce(func.sum(MeterEvent.quantity), 0)).where(
                *_of(namespace), col(MeterEvent.at) < start
            )
        ).one()
    )
    reached_at = None
    if sold_before >= FREE_SALES_MICROUSD:
        running = 0
        rows = session.exec(
            select(MeterEvent.at, MeterEvent.quantity)
            .where(*_of(namespace), col(MeterEvent.at) < start)
            .order_by(col(MeterEvent.at), col(MeterEvent.id))
            .execution_options(yield_per=1000)
        )
        for at, quantity in rows:
            running += quantity
            if running >= FREE_SALES_MICROUSD:
                reached_at = at
                break
    sales = [
        Sale(at=at, pack=pack, action=action, price=int(quantity))
        for at, pack, action, quantity in session.exec(
            select(MeterEvent.at, MeterEvent.pack, MeterEvent.action, MeterEvent.quantity)
            .where(*_of(namespace), col(MeterEvent.at) >= start, col(MeterEvent.at) < end)
            .order_by(col(MeterEvent.at), col(MeterEvent.id))
        ).all()
    ]
    first_at = first if isinstance(first, dt.datetime) else None
    if first_at is not None and first_at.tzinfo is None:
        first_at = first_at.replace(tzinfo=dt.UTC)
    return monthly_report(
        namespace=namespace,
        month=month,
        sales=sales,
        sold_before=sold_before,
        first_priced_at=first_at,
        reached_at=reached_at,
        now=now,
    )
