"""A call's admission and end with a month of calls before it: does their cost grow with the calls stored?

On a fresh SQLite database migrated to head, one organization's key has N ended calls this month. Then
300 calls are admitted (`api.calls.limits.admit`, the limits' one write transaction) and ended
(`api.calls.metering.record`, the end's), one after the other; the median of the two together is printed
for each N. By default the key has a monthly spend cap and each call a publisher's price, so both of the
month's sums are read at each admission; `--free` makes the calls free and the key uncapped (the path
of a noop call: no sum is read). Then, on the same N calls, three reads not made on every call: two
under the writer, a refused call's Retry-After (`api.calls.slot_ends.expected_end`, from its action
version's last finished calls) and the sweep of ended leases (`api.calls.limits.mark_lost`), and the
month's usage as `GET /v1/usage` reads it (`api.calls.metering.usage`), medians of 20. The N calls are
noop tool calls with their meter events (three each) and their key's sums.

Run: `.venv/bin/python -m bench admissions [--months-calls N ...] [--free]` (default N: 0 10000 100000).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, insert
from sqlalchemy.orm import configure_mappers
from sqlmodel import Session

from api.calls import limits, metering, slot_ends, spend
from api.calls.costs import Cost
from api.calls.settings import CallSettings
from api.calls.tables import ActionCall, KeySpend, MeterEvent
from api.db import make_engine
from api.migrations import migrate
from api.models import utcnow

SETTINGS = CallSettings(starts_per_minute=10**9)  # 300 calls in a few seconds: the rate limit aside
CALLS = 300
ORG, KEY = "org_bench", "key_bench"


_UNITS = ((metering.VCPU_MS, 3), (metering.GIB_MS, 1), (metering.TOOL_CALL, 1))
"""A noop tool call's meter events."""


class _Node:
    node_id = "node-a"
    slots_total = 8
    slots_free = 8


def _month_of_calls(engine: Engine, n: int, now: dt.datetime) -> None:
    """N ended calls of this month, as the api would have left them (their rows and their key's sum)."""
    start = limits.month_start(now)
    rows = [
        {
            "id": f"tcall_{i}",
            "org_id": ORG,
            "key_id": KEY,
            "surface": "http",
            "pack": "com.example.tools/echo",
            "version": "1.0.0",
            "action": "noop",
            "node_id": "node-a",
            "state": "done",
            "timeout_ms": 1000,
            "price_microusd": 1,
            "started_at": start + dt.timedelta(seconds=i % 3600),
            "finished_at": start + dt.timedelta(seconds=i % 3600, milliseconds=50),
            "deadline_at": start,
            "lease_expires_at": start,
            "price": 1,
            "total": 3,
        }
        for i in range(n)
    ]
    events = [
        {
            "call_id": row["id"],
            "org_id": ORG,
            "key_id": KEY,
            "unit": unit,
            "quantity": quantity,
            "at": row["finished_at"],
            "publisher": "com.example.tools",
            "pack": row["pack"],
            "action": row["action"],
        }
        for row in rows
        for unit, quantity in _UNITS
    ]
    with Session(engine) as session:
        if rows:
            session.execute(insert(ActionCall), rows)
            session.execute(insert(MeterEvent), events)
            sums = KeySpend(key_id=KEY, month=spend.month_of(now), org_id=ORG, calls=n, price=n, total=3 * n)
            sums.vcpu_ms, sums.gib_ms, sums.tool_calls = (n * quantity for _, quantity in _UNITS)
            session.add(sums)
        session.commit()


def _median_ms(engine: Engine, read: Callable[[Session], object], times: int = 20) -> float:
    took = []
    for _ in range(times):
        with Session(engine) as session:
            started = time.perf_counter()
            read(session)
            took.append(time.perf_counter() - started)
            session.rollback()
    return statistics.median(took) * 1000


def measure(n: int, *, free: bool) -> tuple[float, float, float, float]:
    """Medians in ms with `n` calls before: a call's admission and end, a refusal's Retry-After, the sweep,
    the month's usage."""
    with tempfile.TemporaryDirectory(prefix="b3os-bench-admissions-") as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'api.db'}")
        try:
            migrate(engine)
            _month_of_calls(engine, n, utcnow())
            times = []
            running = []
            for i in range(CALLS):
                adm = limits.Admission(
                    call_id=f"tcall_new_{i}",
                    org_id=ORG,
                    key_id=KEY,
                    spend_cap_microusd=None if free else 10**12,
                    surface="http",
                    pack="com.example.tools/echo",
                    version="1.0.0",
                    action="noop",
                    price=0 if free else 1,
                    timeout_ms=1000,
                )
                cost = Cost(floor=2, price=adm.price)
                outcome = metering.Outcome(200, None, None, True, 0, 0, cost)
                started = time.perf_counter()
                with Session(engine) as session:
                    call = limits.admit(session, adm=adm, nodes=[_Node()], settings=SETTINGS, clock=utcnow)
                with Session(engine) as session:
                    metering.record(session, call=call, outcome=outcome, now=utcnow())
                    session.commit()
                times.append(time.perf_counter() - started)
                running = [call]  # (ended: as a running call, for the Retry-After's read below)
            retry_after = _median_ms(engine, lambda s: slot_ends.expected_end(s, running, utcnow()))
            sweep = _median_ms(engine, lambda s: limits.mark_lost(s, now=utcnow()))
            month = spend.month_of(utcnow())
            usage = _median_ms(engine, lambda s: metering.usage(s, org_id=ORG, month=month))
            return statistics.median(times) * 1000, retry_after, sweep, usage
        finally:
            engine.dispose()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench admissions", description=__doc__.splitlines()[0])
    parser.add_argument("--months-calls", type=int, nargs="+", default=[0, 10_000, 100_000], metavar="N")
    parser.add_argument("--free", action="store_true", help="free calls of an uncapped key")
    args = parser.parse_args(argv)
    configure_mappers()  # as the api's start does (a row built by model_construct needs its mapper)
    kind = "free calls, no cap" if args.free else "priced calls of a capped key"
    for n in args.months_calls:
        median, retry_after, sweep, usage = measure(n, free=args.free)
        print(
            f"{kind}: {n:>7,} calls before: admission and end, median {median:.2f} ms; "
            f"a refusal's Retry-After {retry_after:.2f} ms; the sweep of ended leases {sweep:.2f} ms; "
            f"the month's usage (GET /v1/usage) {usage:.2f} ms"
        )
    return 0
