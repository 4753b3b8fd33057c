"""Admission on SQLite and PostgreSQL: the limits hold when many sessions admit calls at once."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine
from sqlmodel import Session, col, func, select

from api.accounts.organizations import new_id
from api.calls import admission, limits, metering
from api.calls.costs import Cost
from api.calls.errors import ConcurrencyLimited
from api.calls.settings import CallSettings
from api.calls.tables import ActionCall, KeySpend, MeterEvent
from api.db import make_engine, read_session
from api.errors import CallError, RateLimited
from api.models import Node, utcnow

SETTINGS = CallSettings()
Units = tuple[tuple[str, int], ...]


@pytest.fixture
def engine(migrated_database_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_database_url)
    with Session(engine) as session:
        for node_id in ("n1", "n2"):
            session.add(
                Node(node_id=node_id, url="http://127.0.0.1:9", slots_total=8, slots_free=8, installed=[])
            )
        session.commit()
    yield engine
    engine.dispose()


def _admit(
    engine: Engine,
    org: str,
    nodes: list[Node],
    price: int = 0,
    cap: int | None = None,
    clock: Callable[[], dt.datetime] = utcnow,
    surface: str = "http",
) -> str:
    adm = _admission(org, price, cap, surface)
    try:
        with Session(engine) as session:
            call = limits.admit(session, adm=adm, nodes=nodes, settings=SETTINGS, clock=clock)
            return f"ok:{call.node_id}"
    except CallError as exc:
        return f"{exc.code}:{exc.reason or ''}:{exc.retry_after}"


def _admission(org: str, price: int = 0, cap: int | None = None, surface: str = "http") -> limits.Admission:
    return limits.Admission(
        call_id=new_id("tcall"),
        org_id=org,
        key_id=f"key-{org}",
        spend_cap_microusd=cap,
        surface=surface,
        pack="a.b/c",
        version="1.0.0",
        action="x",
        price=price,
        timeout_ms=5000,
    )


def _row(
    org: str,
    at: dt.datetime,
    *,
    state: str = "running",
    lease_expires_at: dt.datetime | None = None,
) -> ActionCall:
    return ActionCall(
        id=new_id("tcall"),
        org_id=org,
        key_id="k",
        surface="http",
        pack="a.b/c",
        version="1.0.0",
        action="x",
        node_id="n1",
        state=state,
        timeout_ms=1000,
        started_at=at,
        deadline_at=at,
        lease_expires_at=lease_expires_at or at,
    )


def _nodes(engine: Engine, *ids: str) -> list[Node]:
    with Session(engine) as session:
        return list(session.exec(select(Node).where(col(Node.node_id).in_(ids))).all())


def test_concurrent_admissions_of_one_org_stop_at_4(engine: Engine) -> None:
    nodes = _nodes(engine, "n1", "n2")
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: _admit(engine, "org-a", nodes), range(10)))
    assert sum(r.startswith("ok:") for r in results) == 4
    assert all(r.startswith("concurrency_limited::") for r in results if not r.startswith("ok:"))
    # Least loaded first: the 4 calls spread over the two nodes.
    assert sorted(r for r in results if r.startswith("ok:")) == ["ok:n1", "ok:n1", "ok:n2", "ok:n2"]


def test_a_waiting_call_reads_that_it_would_be_refused_without_waiting_for_the_writers_turn(
    engine: Engine,
) -> None:
    nodes = _nodes(engine, "n1", "n2")
    assert all(_admit(engine, "org-a", nodes).startswith("ok:") for _ in range(4))

    def refused(org: str) -> str:
        with read_session(engine) as session:
            try:
                limits.refusal(session, adm=_admission(org), nodes=nodes, settings=SETTINGS, now=utcnow())
            except CallError as exc:
                return exc.reason or exc.code
            return "admissible"

    # another transaction holds the writers' turn (on SQLite the database's write lock) meanwhile
    with Session(engine) as writer, ThreadPoolExecutor(2) as pool:
        writer.connection()
        answers = [pool.submit(refused, org) for org in ("org-a", "org-b")]
        assert [a.result(timeout=30) for a in answers] == ["concurrency_limited", "admissible"]
    assert _admit(engine, "org-b", nodes).startswith("ok:")


def test_concurrent_admissions_to_one_node_stop_at_8(engine: Engine) -> None:
    node = _nodes(engine, "n1")
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(lambda i: _admit(engine, f"org-{i % 4}", node), range(12)))
    assert sum(r.startswith("ok:") for r in results) == 8
    busy = [r for r in results if not r.startswith("ok:")]
    assert len(busy) == 4 and all(r.startswith("tool_unavailable:node_busy:") for r in busy)


def test_starts_stop_at_120_a_minute_and_retry_after_is_when_the_oldest_leaves(engine: Engine) -> None:
    now = utcnow()
    with Session(engine) as session:
        for i in range(119):
            at = now - dt.timedelta(seconds=59) + dt.timedelta(milliseconds=i)
            session.add(_row("org-r", at, state="done"))
        session.commit()
    nodes = _nodes(engine, "n1", "n2")
    # admitted half a second after `now` whatever the machine's pace (the oldest start leaves at now + 1 s;
    # on a busy machine the writes above took longer than that once)
    soon = now + dt.timedelta(seconds=0.5)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _admit(engine, "org-r", nodes, clock=lambda: soon), range(4)))
    assert sum(r.startswith("ok:") for r in results) == 1
    assert sorted(r for r in results if not r.startswith("ok:")) == ["rate_limited::1"] * 3
    with Session(engine) as session:
        assert session.exec(select(func.count()).where(col(ActionCall.org_id) == "org-r")).one() == 120


def test_past_20_starts_a_minute_routine_steps_calls_start_one_every_half_second(engine: Engine) -> None:
    """An organization's first 20 starts of a minute go at once; past them its routine steps' calls are
    spread over the minute (60 s / 120), while its calls over HTTP and MCP still take the whole window."""
    now = utcnow()
    with Session(engine) as session:
        for i in range(19):
            session.add(
                _row("org-p", now - dt.timedelta(seconds=30) + dt.timedelta(milliseconds=i), state="done")
            )
        session.commit()
    nodes = _nodes(engine, "n1", "n2")
    assert _admit(engine, "org-p", nodes, clock=lambda: now, surface="routine").startswith("ok:")  # the 20th
    soon = now + dt.timedelta(seconds=0.3)
    assert _admit(engine, "org-p", nodes, clock=lambda: soon, surface="routine") == "rate_limited::1"
    try:
        with Session(engine) as session:
            adm = _admission("org-p", surface="routine")
            limits.admit(session, adm=adm, nodes=nodes, settings=SETTINGS, clock=lambda: soon)
    except CallError as exc:
        assert exc.message == (
            "this organization started 20 calls in the last 60 seconds: its routine steps' calls now start "
            "one every 0.5 seconds"
        )
        assert exc.details == {"limit": 120}
    assert _admit(engine, "org-p", nodes, clock=lambda: soon).startswith("ok:")  # over HTTP: at once
    # half a second after the latest start (the HTTP call's), the next routine step's call starts
    later = soon + dt.timedelta(seconds=0.5)
    assert _admit(engine, "org-p", nodes, clock=lambda: later, surface="routine").startswith("ok:")
    # another organization's routine calls are not spread by this one's
    assert _admit(engine, "org-q", nodes, clock=lambda: soon, surface="routine").startswith("ok:")


def test_priced_calls_in_flight_hold_their_price_against_the_quota(engine: Engine) -> None:
    nodes = _nodes(engine, "n1", "n2")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _admit(engine, "org-q", nodes, price=8_000_000), range(4)))
    assert sum(r.startswith("ok:") for r in results) == 2  # 2 x 8 USD held; a third would pass 20 USD
    refused = [r for r in results if not r.startswith("ok:")]
    assert all(r.startswith("quota_exceeded::") for r in refused)
    # Only running calls tip the balance, so Retry-After is when the soonest of them must end (5 s + 10 s).
    assert all(int(r.rsplit(":", 1)[1]) <= 15 for r in refused)


def test_an_expired_lease_holds_no_slot_and_is_marked_lost(engine: Engine) -> None:
    now = utcnow()
    with Session(engine) as session:
        for _ in range(4):
            at = now - dt.timedelta(seconds=50)
            session.add(_row("org-l", at, lease_expires_at=now - dt.timedelta(seconds=1)))
        session.commit()
    assert _admit(engine, "org-l", _nodes(engine, "n1")).startswith("ok:")
    with Session(engine) as session:
        assert limits.mark_lost(session, now=now) == 4
        states = session.exec(select(ActionCall.state).where(col(ActionCall.org_id) == "org-l")).all()
    assert sorted(states) == ["lost"] * 4 + ["running"]


async def test_an_organizations_waiting_calls_try_again_together_about_as_often_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 routine calls of one organization wait 2 s for a slot that never frees: besides their first
    tries, they try about every ADMISSION_POLL_S between them (each alone would try every 0.1 s: ~400)."""
    monkeypatch.setattr(admission, "ADMISSION_POLL_S", 0.1)
    tries = {"read": 0, "write": 0}

    class Full:
        async def read(self, fn: Callable[[Session], None]) -> None:
            tries["read"] += 1
            raise ConcurrencyLimited("full", retry_after=1)

        async def write(self, fn: Callable[[Session], None]) -> None:
            tries["write"] += 1
            raise ConcurrencyLimited("full", retry_after=1)

    admissions = admission.Admissions(Full())  # type: ignore[arg-type]
    waits = [admissions.admit("org-a", lambda s: None, lambda s: None, wait_s=2) for _ in range(20)]  # type: ignore[arg-type, return-value]
    answers = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(a, ConcurrencyLimited) for a in answers)
    assert tries["write"] == 20  # the first try writes; every later one reads that it would be refused
    assert 1 <= tries["read"] < 100, tries


def test_a_full_organizations_retry_after_is_when_its_soonest_call_ends_at_its_kinds_longest_time(
    engine: Engine,
) -> None:
    now = utcnow()
    with Session(engine) as session:
        # the action's last 20 finished calls: 19 took 1 s, one took 4 s
        for i, took in enumerate([1.0] * 19 + [4.0]):
            ended = now - dt.timedelta(seconds=100 - i)
            row = _row("org-h", ended - dt.timedelta(seconds=took), state="done")
            row.finished_at = ended
            session.add(row)
        # 4 running calls, started 0.5 s ago, with 20 s left to their deadline
        for _ in range(4):
            row = _row(
                "org-f", now - dt.timedelta(seconds=0.5), lease_expires_at=now + dt.timedelta(seconds=50)
            )
            row.deadline_at = now + dt.timedelta(seconds=20)
            session.add(row)
        session.commit()
    nodes = _nodes(engine, "n1", "n2")
    # a running call may take as long as the longest recent one: 3.5 s more (a typical time, 1 s, would send
    # the caller back 3 s before a slot can be free); whole seconds, rounded up
    assert _admit(engine, "org-f", nodes, clock=lambda: now) == "concurrency_limited::4"
    # once the calls run longer than every recent one, only their deadline bounds them
    later = now + dt.timedelta(seconds=4)
    assert _admit(engine, "org-f", nodes, clock=lambda: later) == "concurrency_limited::16"


async def test_a_routine_call_refused_for_its_starts_waits_in_the_api_when_its_turn_comes_in_time() -> None:
    """A start refused with Retry-After 1 inside a 5 s wait is waited out in the api; one of 3 s inside a
    2 s wait, and an upstream's 429, are answered at once."""
    tries = {"read": 0, "write": 0}

    class SpacedThenFree:
        async def read(self, fn: Callable[[Session], None]) -> None:
            tries["read"] += 1

        async def write(self, fn: Callable[[Session], str]) -> str:
            tries["write"] += 1
            if tries["write"] == 1:
                raise RateLimited("spread", retry_after=0.4)
            return "admitted"

    admissions = admission.Admissions(SpacedThenFree())  # type: ignore[arg-type]
    assert await admissions.admit("org-a", lambda s: None, lambda s: None, wait_s=5) == "admitted"  # type: ignore[arg-type, comparison-overlap]
    assert tries == {"read": 1, "write": 2}

    for refused, wait_s in [
        (RateLimited("minute", retry_after=3), 2.0),
        (RateLimited("up", reason="upstream", retry_after=1), 5.0),
    ]:

        class Refusing:
            async def read(self, fn: Callable[[Session], None]) -> None:
                raise AssertionError("answered at once, not tried again")

            async def write(self, fn: Callable[[Session], None]) -> None:
                raise refused  # noqa: B023

        with pytest.raises(RateLimited) as raised:
            await admission.Admissions(Refusing()).admit(
                "org-a", lambda s: None, lambda s: None, wait_s=wait_s
            )  # type: ignore[arg-type]
        assert raised.value is refused


def _end(
    engine: Engine, call: ActionCall, *, at: dt.datetime, floor: int, price: int = 0, units: Units = ()
) -> None:
    """End `call` at `at` charged `floor` + `price`, as a call's end transaction does."""
    cost = Cost(floor=floor, price=price)
    outcome = metering.Outcome(200, None, None, True, vcpu_ms=0, gib_ms=0, cost=cost, units=units)
    with Session(engine) as session:
        metering.record(session, call=call, outcome=outcome, now=at)
        session.commit()


def _ended(engine: Engine, adm: limits.Admission, *, at: dt.datetime, floor: int, price: int = 0) -> None:
    """Admit `adm` at `at` and end it a second later, charged `floor` + `price`."""
    nodes = _nodes(engine, "n1", "n2")
    with Session(engine) as session:
        call = limits.admit(session, adm=adm, nodes=nodes, settings=SETTINGS, clock=lambda: at)
    _end(engine, call, at=at + dt.timedelta(seconds=1), floor=floor, price=price)


def test_a_keys_cap_holds_what_its_calls_that_ended_this_month_were_charged(engine: Engine) -> None:
    """A call counts in the month it ended in, as `GET /v1/usage` counts it."""
    now = dt.datetime(2026, 12, 15, 12, tzinfo=dt.UTC)
    floor = SETTINGS.unit_prices().tool_call_microusd
    november_end = dt.datetime(2026, 11, 30, 23, 59, 58, tzinfo=dt.UTC)
    _ended(engine, _admission("org-c"), at=november_end - dt.timedelta(seconds=1), floor=900)  # November
    _ended(engine, _admission("org-c"), at=november_end + dt.timedelta(seconds=1), floor=20)  # across
    _ended(engine, _admission("org-c"), at=now - dt.timedelta(hours=1), floor=100)
    _ended(engine, _admission("org-c"), at=now - dt.timedelta(minutes=1), floor=30)
    nodes = _nodes(engine, "n1", "n2")
    # 150 spent this month: a cap of 150 + one call's floor admits it, one micro-USD less does not
    refused = _admit(engine, "org-c", nodes, cap=150 + floor - 1, clock=lambda: now)
    assert refused.startswith("quota_exceeded::")
    try:
        with Session(engine) as session:
            adm = _admission("org-c", cap=150 + floor - 1)
            limits.admit(session, adm=adm, nodes=nodes, settings=SETTINGS, clock=lambda: now)
    except CallError as exc:
        assert exc.details is not None and exc.details["spent_microusd"] == 150
    assert _admit(engine, "org-c", nodes, cap=150 + floor, clock=lambda: now).startswith("ok:")
    with Session(engine) as session:
        sums = {(s.key_id, s.month, s.total) for s in session.exec(select(KeySpend))}
        usage = metering.usage(session, org_id="org-c", month="2026-12")
    assert sums == {("key-org-c", "2026-11", 900), ("key-org-c", "2026-12", 150)}
    assert usage["cost"]["total"] == 150  # the usage of December says the same


def test_an_organizations_publisher_prices_add_up_over_its_keys_and_a_lost_call_adds_nothing(
    engine: Engine,
) -> None:
    now = utcnow()
    quota = SETTINGS.org_publisher_quota_microusd
    first = _admission("org-d", price=quota // 2)
    other = dataclasses.replace(_admission("org-d", price=quota // 2 - 10), key_id="key-other")
    _ended(engine, first, at=now, floor=1, price=first.price)
    _ended(engine, other, at=now, floor=1, price=other.price)
    nodes = _nodes(engine, "n1", "n2")
    # a call whose lease ended is marked lost; its late end bills nothing
    late = _admission("org-d", price=5)
    with Session(engine) as session:
        call = limits.admit(session, adm=late, nodes=nodes, settings=SETTINGS, clock=lambda: now)
    with Session(engine) as session:
        assert limits.mark_lost(session, now=call.lease_expires_at) == 1
    _end(
        engine,
        call,
        at=now,
        floor=1,
        price=5,
        units=((metering.TOOL_CALL, 1), (metering.PUBLISHER_MICROUSD, 5)),
    )
    with Session(engine) as session:  # nor metered: its publisher is not paid for it
        assert not session.exec(select(MeterEvent).where(col(MeterEvent.call_id) == call.id)).all()
    # 10 micro-USD of the quota left: a price of 10 is admitted, 11 is not
    assert _admit(engine, "org-d", nodes, price=11).startswith("quota_exceeded::")
    assert _admit(engine, "org-d", nodes, price=10).startswith("ok:")


def test_the_months_usage_is_its_ended_calls_and_their_units_per_key_free_ones_too(engine: Engine) -> None:
    now = dt.datetime(2026, 12, 15, 12, tzinfo=dt.UTC)
    nodes = _nodes(engine, "n1", "n2")
    ended = [  # (key, ended at, floor, price, units)
        (
            "key-a",
            now,
            100,
            7,
            ((metering.VCPU_MS, 12), (metering.TOOL_CALL, 1), (metering.PUBLISHER_MICROUSD, 7)),
        ),
        ("key-a", now, 0, 0, ((metering.ACTION_CALL, 1), (metering.ACTION_CALL, 2))),  # free; a unit twice
        ("key-b", now, 10, 0, ((metering.ACTION_CALL, 1),)),
        ("key-b", dt.datetime(2026, 11, 30, 23, 59, tzinfo=dt.UTC), 5, 0, ()),  # November's
    ]
    for key, at, floor, price, units in ended:
        adm = dataclasses.replace(_admission("org-u"), key_id=key)
        with Session(engine) as session:
            call = limits.admit(session, adm=adm, nodes=nodes, settings=SETTINGS, clock=lambda at=at: at)
        _end(engine, call, at=at, floor=floor, price=price, units=units)
    with Session(engine) as session:
        lost = limits.admit(
            session, adm=_admission("org-u"), nodes=nodes, settings=SETTINGS, clock=lambda: now
        )
    with Session(engine) as session:  # a call lost meanwhile counts nowhere
        assert limits.mark_lost(session, now=lost.lease_expires_at) == 1
    _end(engine, lost, at=now, floor=100, price=0, units=((metering.TOOL_CALL, 1),))
    with Session(engine) as session:
        usage = metering.usage(session, org_id="org-u", month="2026-12")
    assert usage["calls"] == 3
    assert usage["cost"] == {"compute": 0, "floor": 110, "price": 7, "total": 117}
    assert usage["units"] == {
        metering.VCPU_MS: 12,
        metering.GIB_MS: 0,
        metering.TOOL_CALL: 1,
        metering.PUBLISHER_MICROUSD: 7,
        metering.ACTION_CALL: 4,
    }
    assert [
        (k["key_id"], k["calls"], k["cost"]["total"], k["units"][metering.ACTION_CALL]) for k in usage["keys"]
    ] == [
        ("key-a", 2, 107, 3),
        ("key-b", 1, 10, 1),
    ]
