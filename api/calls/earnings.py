"""B3OS's cut of a publisher's sales, and the monthly earnings report a publisher reads.

The rule: B3OS keeps nothing of a publisher's price until the earlier of 12 calendar months after
the publisher's first priced call, or 1,000 USD of its sales; from then on it keeps 20%. A sale
that crosses 1,000 USD is cut only on its part above 1,000 USD. The cut of each (tool, day) line is
20% of the liable part rounded down to a whole micro-USD (the rounding favours the publisher); the
month's totals are the sums of the lines. Every line says which rate is in force and why.

Amounts are integer micro-USD and `accrued`: a record of what was sold, nothing is paid out.
Times are UTC; "12 calendar months after" keeps the day of month, clamped to the month's last day.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

CUT_PERCENT = 20
FREE_MONTHS = 12
FREE_SALES_MICROUSD = 1_000 * 10**6


@dataclass(frozen=True)
class Sale:
    """One priced call: when, which tool, and the publisher's price in micro-USD."""

    at: datetime
    pack: str
    action: str
    price: int


@dataclass(frozen=True)
class Rate:
    """The cut in force at some moment and the sentence that says why."""

    percent: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """`{"percent", "reason"}`."""
        return {"percent": self.percent, "reason": self.reason}


def add_months(at: datetime, months: int) -> datetime:
    """The same moment `months` calendar months later, the day clamped to the month's last day."""
    index = at.year * 12 + (at.month - 1) + months
    year, month = divmod(index, 12)
    day = min(at.day, calendar.monthrange(year, month + 1)[1])
    return at.replace(year=year, month=month + 1, day=day)


def usd(microusd: int) -> str:
    """Micro-USD as a USD amount with at least two decimals: 1_234_500 -> "1.2345"."""
    whole, frac = divmod(microusd, 10**6)
    text = f"{frac:06d}".rstrip("0")
    return f"{whole:,}.{text.ljust(2, '0')}"


def rate_at(
    at: datetime, *, first_priced_at: datetime | None, reached_at: datetime | None, sold: int
) -> Rate:
    """The cut in force at `at`.

    Args:
        at: the moment asked about.
        first_priced_at: the publisher's first priced call, None if it has none.
        reached_at: when its sales reached 1,000 USD, None if they have not (by `at`).
        sold: its sales up to `at`, in micro-USD (for the sentence).
    """
    if first_priced_at is None or first_priced_at > at:
        return Rate(
            0,
            f"0%: no priced call yet; no cut until {FREE_MONTHS} calendar months after the first "
            f"priced call or {usd(FREE_SALES_MICROUSD)} USD of sales, whichever comes first",
        )
    free_until = add_months(first_priced_at, FREE_MONTHS)
    if reached_at is not None and reached_at <= at and reached_at < free_until:
        return Rate(
            CUT_PERCENT,
            f"{CUT_PERCENT}%: sales reached {usd(FREE_SALES_MICROUSD)} USD on "
            f"{reached_at:%Y-%m-%d}, before {FREE_MONTHS} calendar months after the first "
            f"priced call ({first_priced_at:%Y-%m-%d}) ended",
        )
    if at >= free_until:
        return Rate(
            CUT_PERCENT,
            f"{CUT_PERCENT}%: {FREE_MONTHS} calendar months after the first priced call on "
            f"{first_priced_at:%Y-%m-%d} ended on {free_until:%Y-%m-%d}",
        )
    return Rate(
        0,
        f"0% until {free_until:%Y-%m-%d} ({FREE_MONTHS} calendar months after the first priced call "
        f"on {first_priced_at:%Y-%m-%d}) or {usd(FREE_SALES_MICROUSD)} USD of sales, whichever comes "
        f"first; {usd(sold)} USD sold so far",
    )


@dataclass
class _Line:
    calls: int = 0
    gross: int = 0
    liable: int = 0
    last: datetime | None = None
    sold_after: int = 0

    @property
    def cut(self) -> int:
        return self.liable * CUT_PERCENT // 100


@dataclass
class _Tool:
    days: dict[date, _Line] = field(default_factory=dict)


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """The first moment of a `YYYY-MM` month and of the next one, in UTC.

    Raises:
        ValueError: `month` is not `YYYY-MM`.
    """
    try:
        start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"month {month!r} is not a month such as 2026-05") from None
    return start, add_months(start, 1)


def monthly_report(
    *,
    namespace: str,
    month: str,
    sales: list[Sale],
    sold_before: int,
    first_priced_at: datetime | None,
    reached_at: datetime | None = None,
    now: datetime,
) -> dict[str, Any]:
    """The earnings of one publisher namespace for one month.

    Args:
        namespace: the publisher namespace.
        month: `YYYY-MM`.
        sales: the month's priced calls of the namespace's tools.
        sold_before: the namespace's sales before the month, in micro-USD.
        first_priced_at: the namespace's first priced call ever, None if it has none.
        reached_at: when the namespace's sales reached 1,000 USD, if that was before the month.
        now: the clock's time; the top-level rate is the one in force at the earlier of now and the
            month's end.

    Returns:
        calls, gross, cut and net for the month, the rate in force, and daily totals per tool.
    """
    start, end = month_bounds(month)
    tools: dict[tuple[str, str], _Tool] = {}
    sold = sold_before
    for sale in sorted(sales, key=lambda s: s.at):
        before, sold = sold, sold + sale.price
        liable = sale.price
        if sale.at < add_months(first_priced_at or sale.at, FREE_MONTHS):
            liable = max(0, sold - max(before, FREE_SALES_MICROUSD))
        if reached_at is None and sold >= FREE_SALES_MICROUSD:
            reached_at = sale.at
        line = tools.setdefault((sale.pack, sale.action), _Tool()).days.setdefault(sale.at.date(), _Line())
        line.calls += 1
        line.gross += sale.price
        line.liable += liable
        line.last = sale.at
        line.sold_after = sold

    def rate(at: datetime, sold_then: int) -> Rate:
        return rate_at(
            at,
            first_priced_at=first_priced_at,
            reached_at=reached_at if reached_at and reached_at <= at else None,
            sold=sold_then,
        )

    out_tools: list[dict[str, Any]] = []
    calls = gross = cut = 0
    for (pack, action), tool in sorted(tools.items()):
        lines = sorted(tool.days.items())
        t_calls, t_gross, t_cut = (sum(getattr(ln, k) for _, ln in lines) for k in ("calls", "gross", "cut"))
        days = [
            {
                "date": day.isoformat(),
                "calls": ln.calls,
                "gross": ln.gross,
                "cut": ln.cut,
                "net": ln.gross - ln.cut,
                "rate": rate(ln.last or start, ln.sold_after).as_dict(),
            }
            for day, ln in lines
        ]
        out_tools.append(
            {
                "tool": f"{pack.split('/', 1)[-1]}__{action}",
                "pack": pack,
                "action": action,
                "calls": t_calls,
                "gross": t_gross,
                "cut": t_cut,
                "net": t_gross - t_cut,
                "days": days,
            }
        )
        calls, gross, cut = calls + t_calls, gross + t_gross, cut + t_cut
    as_of = min(now, end - timedelta(microseconds=1))
    return {
        "namespace": namespace,
        "month": month,
        "currency": "USD",
        "unit": "micro-USD",
        "amounts": "accrued",
        "calls": calls,
        "gross": gross,
        "cut": cut,
        "net": gross - cut,
        "rate": rate(as_of, sold if as_of >= start else sold_before).as_dict(),
        "tools": out_tools,
    }
