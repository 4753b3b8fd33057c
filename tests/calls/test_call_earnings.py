"""Earnings through the api, with its clock set: both thresholds of the cut, the publisher org only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.accounts import organizations
from api.accounts.scopes import OWNER_SCOPES
from api.calls import metering
from api.calls.costs import Cost
from api.calls.tables import ActionCall
from api.config import Settings
from api.main import create_app
from api.registry import publishers

NS = "com.example.tools"
FIRST = dt.datetime(2026, 3, 15, 10, 0, tzinfo=dt.UTC)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def app_and_clock(tmp_path: Path) -> Iterator[tuple[TestClient, Clock, dict[str, str], dict[str, str]]]:
    app = create_app(Settings(data_dir=tmp_path / "state"))
    clock = Clock(FIRST)
    app.state.calls.clock = clock
    with Session(app.state.engine) as session:
        pub = organizations.create_organization(session, name="publisher")
        _, pub_secret = organizations.create_api_key(session, org_id=pub.id, scopes=OWNER_SCOPES)
        publishers.set_publisher(session, namespace=NS, org_id=pub.id)
        other = organizations.create_organization(session, name="customer")
        _, other_secret = organizations.create_api_key(session, org_id=other.id, scopes=OWNER_SCOPES)
        session.commit()
    with TestClient(app) as client:
        yield (
            client,
            clock,
            {"Authorization": f"Bearer {pub_secret}"},
            {"Authorization": f"Bearer {other_secret}"},
        )
    app.state.engine.dispose()


def sell(client: TestClient, at: dt.datetime, price: int, action: str = "echo") -> None:
    """Record one answered priced call at `at`, the way the call service records it."""
    engine = client.app.state.engine  # type: ignore[attr-defined]
    with Session(engine) as session:
        call = ActionCall(
            id=organizations.new_id("tcall"),
            org_id="org_customer",
            key_id="key_customer",
            surface="http",
            pack=f"{NS}/echo",
            version="1.0.0",
            action=action,
            node_id="node-a",
            timeout_ms=1000,
            price_microusd=price,
            started_at=at,
            deadline_at=at,
            lease_expires_at=at,
        )
        session.add(call)
        session.flush()
        outcome = metering.Outcome(
            status=200,
            code=None,
            reason=None,
            ran=True,
            vcpu_ms=3,
            gib_ms=1,
            cost=Cost(compute=1, floor=10, price=price),
            units=((metering.TOOL_CALL, 1), (metering.PUBLISHER_MICROUSD, price)),
        )
        metering.record(session, call=call, outcome=outcome, now=at)
        session.commit()


def earnings(client: TestClient, headers: dict[str, str], month: str) -> dict:
    r = client.get(f"/v1/actions/publishers/{NS}/earnings", params={"month": month}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_no_cut_in_the_first_months_then_20_percent_twelve_calendar_months_after(app_and_clock) -> None:
    client, clock, pub, _ = app_and_clock
    sell(client, FIRST, 100)
    sell(client, FIRST + dt.timedelta(days=1), 100)
    clock.now = FIRST + dt.timedelta(days=20)
    march = earnings(client, pub, "2026-03")
    assert (march["calls"], march["gross"], march["cut"], march["net"]) == (2, 200, 0, 200)
    assert march["rate"]["percent"] == 0 and "0% until 2027-03-15" in march["rate"]["reason"]
    assert [d["date"] for d in march["tools"][0]["days"]] == ["2026-03-15", "2026-03-16"]
    sell(client, dt.datetime(2027, 3, 15, 9, 59, tzinfo=dt.UTC), 1000)
    sell(client, dt.datetime(2027, 3, 15, 10, 0, tzinfo=dt.UTC), 1000)
    clock.now = dt.datetime(2027, 3, 20, tzinfo=dt.UTC)
    later = earnings(client, pub, "2027-03")
    assert (later["gross"], later["cut"], later["net"]) == (2000, 200, 1800)
    assert later["rate"] == {
        "percent": 20,
        "reason": "20%: 12 calendar months after the first priced call on 2026-03-15 ended on 2027-03-15",
    }


def test_20_percent_once_sales_reach_1000_usd_in_an_earlier_month(app_and_clock) -> None:
    client, clock, pub, _ = app_and_clock
    for day in range(10):  # 10 x 99.99 USD = 999.90 USD in March
        sell(client, FIRST + dt.timedelta(hours=day), 99_990_000)
    sell(client, dt.datetime(2026, 3, 31, 23, 0, tzinfo=dt.UTC), 600_000)  # crosses 1,000 USD by 0.50 USD
    sell(client, dt.datetime(2026, 4, 2, tzinfo=dt.UTC), 1_000_000)
    clock.now = dt.datetime(2026, 4, 10, tzinfo=dt.UTC)
    march = earnings(client, pub, "2026-03")
    assert march["cut"] == 100_000  # 20% of the 0.50 USD above 1,000 USD
    april = earnings(client, pub, "2026-04")
    assert (april["gross"], april["cut"], april["net"]) == (1_000_000, 200_000, 800_000)
    assert april["rate"]["percent"] == 20
    assert "sales reached 1,000.00 USD on 2026-03-31" in april["rate"]["reason"]


def test_only_the_publisher_org_reads_its_earnings_and_sees_no_customer(app_and_clock) -> None:
    client, clock, pub, other = app_and_clock
    sell(client, FIRST, 100)
    r = client.get(f"/v1/actions/publishers/{NS}/earnings", headers=other)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == f"Your organization has no publisher namespace {NS}."
    report = earnings(client, pub, "2026-03")
    assert "org_customer" not in str(report) and "key_customer" not in str(report)
    bad = client.get(f"/v1/actions/publishers/{NS}/earnings", params={"month": "2026-13"}, headers=pub)
    assert bad.status_code == 400 and "2026-13" in bad.json()["error"]["message"]
