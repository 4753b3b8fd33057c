"""B3OS's cut: nothing until 12 calendar months after the first priced call or 1,000 USD of sales."""

from __future__ import annotations

from datetime import UTC, datetime

from api.calls.earnings import Sale, add_months, monthly_report, rate_at

FIRST = datetime(2026, 3, 15, 10, 0, tzinfo=UTC)


def _sale(at: datetime, price: int, action: str = "echo") -> Sale:
    return Sale(at=at, pack="com.example.tools/echo", action=action, price=price)


def test_twelve_calendar_months_keep_the_day_and_clamp_it() -> None:
    assert add_months(FIRST, 12) == datetime(2027, 3, 15, 10, 0, tzinfo=UTC)
    assert add_months(datetime(2028, 2, 29, tzinfo=UTC), 12) == datetime(2029, 2, 28, tzinfo=UTC)
    assert add_months(datetime(2026, 1, 31, tzinfo=UTC), 1) == datetime(2026, 2, 28, tzinfo=UTC)


def test_no_cut_before_either_threshold_and_the_line_says_until_when() -> None:
    sales = [
        _sale(datetime(2026, 4, 2, 9, tzinfo=UTC), 100),
        _sale(datetime(2026, 4, 2, 11, tzinfo=UTC), 100),
    ]
    report = monthly_report(
        namespace="com.example.tools",
        month="2026-04",
        sales=sales,
        sold_before=300,
        first_priced_at=FIRST,
        now=datetime(2026, 4, 20, tzinfo=UTC),
    )
    assert (report["calls"], report["gross"], report["cut"], report["net"]) == (2, 200, 0, 200)
    assert report["rate"]["percent"] == 0
    assert "0% until 2027-03-15" in report["rate"]["reason"]
    assert "0.0005 USD sold so far" in report["rate"]["reason"]
    day = report["tools"][0]["days"][0]
    assert report["tools"][0]["tool"] == "echo__echo"
    assert (day["date"], day["calls"], day["gross"], day["cut"], day["net"]) == ("2026-04-02", 2, 200, 0, 200)
    assert set(day) == {"date", "calls", "gross", "cut", "net", "rate"}


def test_twenty_percent_from_twelve_calendar_months_after_the_first_priced_call() -> None:
    before = _sale(datetime(2027, 3, 15, 9, 59, tzinfo=UTC), 1000)
    after = _sale(datetime(2027, 3, 15, 10, 0, tzinfo=UTC), 1000)
    report = monthly_report(
        namespace="com.example.tools",
        month="2027-03",
        sales=[before, after],
        sold_before=5_000_000,
        first_priced_at=FIRST,
        now=datetime(2027, 3, 20, tzinfo=UTC),
    )
    assert (report["gross"], report["cut"], report["net"]) == (2000, 200, 1800)
    assert report["rate"]["percent"] == 20
    assert report["rate"]["reason"] == (
        "20%: 12 calendar months after the first priced call on 2026-03-15 ended on 2027-03-15"
    )


def test_the_rate_before_the_anniversary_is_still_zero_on_the_clock() -> None:
    rate = rate_at(datetime(2027, 3, 15, 9, 59, tzinfo=UTC), first_priced_at=FIRST, reached_at=None, sold=0)
    assert rate.percent == 0


def test_twenty_percent_on_the_part_above_one_thousand_usd_of_sales() -> None:
    sold_before = 1_000_000_000 - 300_000  # 999.70 USD sold before the month
    sales = [
        _sale(datetime(2026, 6, 1, 12, tzinfo=UTC), 500_000),
        _sale(datetime(2026, 6, 2, tzinfo=UTC), 500_000),
    ]
    report = monthly_report(
        namespace="com.example.tools",
        month="2026-06",
        sales=sales,
        sold_before=sold_before,
        first_priced_at=FIRST,
        now=datetime(2026, 6, 10, tzinfo=UTC),
    )
    day1, day2 = report["tools"][0]["days"]
    assert (day1["gross"], day1["cut"], day1["net"]) == (
        500_000,
        40_000,
        460_000,
    )  # 20% of the 0.20 USD above
    assert (day2["gross"], day2["cut"], day2["net"]) == (500_000, 100_000, 400_000)
    assert (report["gross"], report["cut"], report["net"]) == (1_000_000, 140_000, 860_000)
    assert report["rate"]["percent"] == 20
    assert "sales reached 1,000.00 USD on 2026-06-01" in report["rate"]["reason"]


def test_a_publisher_with_no_priced_call_pays_nothing_and_is_told_why() -> None:
    report = monthly_report(
        namespace="com.example.tools",
        month="2026-06",
        sales=[],
        sold_before=0,
        first_priced_at=None,
        now=datetime(2026, 6, 10, tzinfo=UTC),
    )
    assert (report["calls"], report["gross"], report["cut"], report["tools"]) == (0, 0, 0, [])
    assert report["rate"]["reason"].startswith("0%: no priced call yet")


def test_daily_totals_are_per_tool_and_name_no_customer() -> None:
    at = datetime(2026, 4, 2, tzinfo=UTC)
    report = monthly_report(
        namespace="com.example.tools",
        month="2026-04",
        sales=[_sale(at, 100), _sale(at, 100, "noop")],
        sold_before=0,
        first_priced_at=FIRST,
        now=at,
    )
    assert [t["tool"] for t in report["tools"]] == ["echo__echo", "echo__noop"]
    assert "org" not in str(report) and "key" not in str(report)
