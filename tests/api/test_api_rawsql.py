"""The call path's statements on the driver (api.rawsql) on SQLite and PostgreSQL, and its short writes
begun on the driver (api.rawsql.Writes): on the event loop only when the writers' turn is free."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from api import rawsql
from api.calls import limits, metering
from api.calls.costs import Cost
from api.calls.service import CallService
from api.calls.settings import CallSettings
from api.calls.tables import DONE, ActionCall
from api.db import WriterBusy, make_engine
from api.deps import ReadSessionDep
from api.migrations import migrate
from api.models import Node, NodeCredential
from api.nodes import live_nodes

AT = dt.datetime(2026, 12, 3, 10, 30, 15, 123456, tzinfo=dt.UTC)


@pytest.fixture
def engine(migrated_engine: Engine) -> Engine:  # noqa: F811
    return migrated_engine


def _call(call_id: str = "tcall_1") -> ActionCall:
    return ActionCall(
        id=call_id,
        org_id="org",
        key_id="key",
        surface="http",
        pack="com.example/p",
        version="1.0.0",
        action="a",
        node_id="n1",
        timeout_ms=1000,
        price_microusd=7,
        started_at=AT,
        deadline_at=AT + dt.timedelta(seconds=1),
        lease_expires_at=AT + dt.timedelta(seconds=31),
    )


def test_rows_written_on_the_driver_read_back_through_sqlalchemy_as_written(engine: Engine) -> None:
    with Session(engine) as session:
        rawsql.execute(session, limits._ADD_CALL, _call().model_dump())
        outcome = metering.Outcome(
            status=200, code=None, reason=None, ran=True, vcpu_ms=3, gib_ms=1, cost=Cost()
        )
        metering.record(session, call=_call(), outcome=outcome, now=AT + dt.timedelta(milliseconds=5))
        session.commit()
    with Session(engine) as session:
        row = session.get(ActionCall, "tcall_1")
        assert row is not None
        assert (row.started_at, row.lease_expires_at) == (AT, AT + dt.timedelta(seconds=31))
        assert (row.state, row.status, row.ran, row.vcpu_ms) == (DONE, 200, True, 3)
        assert row.finished_at == AT + dt.timedelta(milliseconds=5) and row.finished_at.tzinfo is not None
        assert row.code is None


def test_rows_written_by_sqlalchemy_read_on_the_driver_as_sqlalchemy_reads_them(engine: Engine) -> None:
    with Session(engine) as session:
        session.add(
            Node(node_id="n1", url="http://127.0.0.1:9", slots_total=8, slots_free=3, installed=["a/b@1.0.0"])
        )
        session.add(NodeCredential(node_id="n1", prefix="p1", secret_hash="h", call_key="k1"))
        session.commit()
        orm = session.get(Node, "n1")
        assert orm is not None
    with rawsql.Reads(engine) as reads:
        (node,) = live_nodes(reads)
        assert (node.node_id, node.url, node.slots_total, node.slots_free) == (
            "n1",
            "http://127.0.0.1:9",
            8,
            3,
        )
        assert node.installed == ["a/b@1.0.0"]
        assert node.last_seen == orm.last_seen and node.last_seen.tzinfo is not None
        assert node.call_key == "k1"
        assert live_nodes(reads, now=orm.last_seen + dt.timedelta(seconds=16)) == []


def test_a_driver_error_comes_out_as_sqlalchemys_and_the_session_goes_on(engine: Engine) -> None:
    with Session(engine) as session:
        rawsql.execute(session, limits._ADD_CALL, _call().model_dump())
        session.commit()
        with pytest.raises(IntegrityError):
            rawsql.execute(session, limits._ADD_CALL, _call().model_dump())
        session.rollback()
        rawsql.execute(session, limits._ADD_CALL, _call("tcall_2").model_dump())
        session.commit()
    with rawsql.Reads(engine) as reads:
        ids = select(col(ActionCall.id)).where(col(ActionCall.org_id) == bindparam("org"))
        assert sorted(r.id for r in reads.run(ids, {"org": "org"}).rows) == ["tcall_1", "tcall_2"]


def test_a_statement_whose_sql_depends_on_its_values_is_refused(engine: Engine) -> None:
    expanding = select(col(ActionCall.id)).where(col(ActionCall.id).in_(bindparam("ids", expanding=True)))
    with rawsql.Reads(engine) as reads, pytest.raises(ValueError, match="expanding parameter"):
        reads.run(expanding, {"ids": ["a"]})


# --- short writes on the loop (SQLite) ------------------------------------------------------------------


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path}/b3os.db")
    migrate(engine)
    yield engine
    engine.dispose()


def _add(session: rawsql.Transaction, call_id: str) -> str:
    rawsql.execute(session, limits._ADD_CALL, _call(call_id).model_dump())
    session.commit()
    return call_id


def _ids(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return sorted(session.scalars(select(col(ActionCall.id))).all())


def test_a_write_begins_now_only_when_no_writer_of_this_process_holds_the_turn(
    sqlite_engine: Engine,
) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with Session(sqlite_engine) as session:
            session.connection()  # BEGIN IMMEDIATE: the writers' turn
            holding.set()
            release.wait(10)
            session.commit()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    try:
        started = time.monotonic()
        with pytest.raises(WriterBusy), rawsql.Writes(sqlite_engine, now=True) as tx:
            _add(tx, "tcall_busy")
        assert time.monotonic() - started < 1.0  # it waited for nothing
    finally:
        release.set()
        holder.join()
    with rawsql.Writes(sqlite_engine, now=True) as tx:
        _add(tx, "tcall_now")
    assert _ids(sqlite_engine) == ["tcall_now"]


_OTHER_PROCESS = """
import sys, time
from sqlmodel import Session, col
from api.db import make_engine
engine = make_engine(sys.argv[1])
with Session(engine) as session:
    session.connection()
    print("holding", flush=True)
    sys.stdin.readline()
    session.commit()
"""


def test_a_write_does_not_begin_now_while_another_process_or_a_writer_outside_the_turn_writes(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    url = str(sqlite_engine.url)
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER_PROCESS, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "holding\n"
        with pytest.raises(WriterBusy), rawsql.Writes(sqlite_engine, now=True) as tx:
            _add(tx, "tcall_1")
    finally:
        other.communicate("\n", timeout=30)
    outside = sqlite3.connect(tmp_path / "b3os.db", isolation_level=None)
    try:
        outside.execute("BEGIN IMMEDIATE")  # a writer that does not take the turn (a migration, a tool)
        started = time.monotonic()
        with pytest.raises(WriterBusy), rawsql.Writes(sqlite_engine, now=True) as tx:
            _add(tx, "tcall_1")
        assert time.monotonic() - started < 1.0  # SQLite's busy wait was off for it
        outside.execute("ROLLBACK")
    finally:
        outside.close()
    with rawsql.Writes(sqlite_engine, now=True) as tx:
        _add(tx, "tcall_1")
    with Session(sqlite_engine) as session:  # the busy wait is back for every other transaction
        assert session.connection().exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000


async def test_a_calls_write_waits_for_its_turn_off_the_event_loop(sqlite_engine: Engine) -> None:
    service = CallService(engine=sqlite_engine, settings=CallSettings())
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with Session(sqlite_engine) as session:
            session.connection()
            holding.set()
            release.wait(10)
            session.commit()

    holder = threading.Thread(target=hold)
    holder.start()
    await asyncio.to_thread(holding.wait, 10)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    write = asyncio.create_task(service.db.write(lambda s: _add(s, "tcall_1")))
    await asyncio.sleep(0.3)
    assert not write.done() and ticks > 0  # the loop went on while the write waited for its turn
    release.set()
    assert await asyncio.wait_for(write, 10) == "tcall_1"
    ticker.cancel()
    holder.join()
    await service.aclose()
    assert _ids(sqlite_engine) == ["tcall_1"]


async def test_a_read_route_keeps_no_writer_waiting_when_every_worker_thread_is_a_writer(
    sqlite_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read route's session (`ReadSessionDep`) holds no writers' turn. Beside 20 heavy runs, a node's
    registry poll read in a request's write session and held the turn while FastAPI serialized its answer
    in a worker thread, and every worker thread was a writer waiting for that turn: each write waited the
    gate's 30 s. (With `SessionDep` here, this test waits for good.)"""
    monkeypatch.setattr("api.db.GATE_WAIT_S", 3600.0)  # a writer waits for its turn for good
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = 2  # the read's thread and one writer's; the other writer waits for a thread
    app = FastAPI()
    app.state.engine = sqlite_engine
    reading_began, writing = threading.Event(), threading.Event()
    first_writer = threading.Lock()

    def until_a_writer_waits_for_a_thread() -> None:
        while limiter.statistics().tasks_waiting < 1:
            time.sleep(0.001)

    @app.get("/read")
    def read(session: ReadSessionDep) -> int:
        reading_began.set()
        count = len(session.exec(select(ActionCall)).all())
        writing.wait()
        until_a_writer_waits_for_a_thread()  # the second writer waits for this thread
        return count  # this thread goes to that writer; the answer is serialized in a thread too

    @app.post("/write/{call_id}")
    def write(call_id: str) -> str:
        writing.set()
        if first_writer.acquire(blocking=False):  # it keeps its thread until the second writer waits for one
            until_a_writer_waits_for_a_thread()  # (else both may end before the read looks: a busy machine)
        with Session(sqlite_engine, expire_on_commit=False) as session:
            return _add(session, call_id)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        reading = asyncio.create_task(client.get("/read"))
        while not reading_began.is_set():  # the read holds its thread first, however busy the machine
            await asyncio.sleep(0.01)
        answers = await asyncio.wait_for(
            asyncio.gather(reading, *(client.post(f"/write/tcall_{i}") for i in range(2))), 60
        )
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert sorted(_ids(sqlite_engine)) == ["tcall_0", "tcall_1"]


def test_a_writes_failed_statement_rolls_back_and_gives_the_turn_back(sqlite_engine: Engine) -> None:
    with rawsql.Writes(sqlite_engine, now=True) as tx:
        _add(tx, "tcall_1")
    with pytest.raises(IntegrityError), rawsql.Writes(sqlite_engine, now=True) as tx:
        rawsql.execute(tx, limits._ADD_CALL, _call("tcall_2").model_dump())
        rawsql.execute(tx, limits._ADD_CALL, _call("tcall_1").model_dump())  # its id is taken
    with rawsql.Writes(sqlite_engine, now=True) as tx:  # the turn is free at once: it was given back
        _add(tx, "tcall_3")
    assert _ids(sqlite_engine) == ["tcall_1", "tcall_3"]  # tcall_2 went with its transaction


def test_writes_begin_again_after_a_commit_and_roll_back_what_was_not_committed(
    sqlite_engine: Engine,
) -> None:
    with rawsql.Writes(sqlite_engine, now=False) as tx:
        _add(tx, "tcall_1")  # commits
        tx.rollback()  # nothing under way: nothing to roll back
        rawsql.execute(tx, limits._ADD_CALL, _call("tcall_2").model_dump())  # a second transaction
        tx.rollback()
        rawsql.execute(tx, limits._ADD_CALL, _call("tcall_3").model_dump())  # a third, never committed
    assert _ids(sqlite_engine) == ["tcall_1"]
    with Session(sqlite_engine) as session:  # the database's write lock went with the block
        _add(session, "tcall_4")
    assert _ids(sqlite_engine) == ["tcall_1", "tcall_4"]


def test_driver_transactions_are_sqlites_only(engine: Engine) -> None:
    if engine.dialect.name == "postgresql":  # its writers wait on their rows' locks, in a session
        with pytest.raises(ValueError, match="SQLite's only"):
            rawsql.Writes(engine, now=True)
        return
    with rawsql.Writes(engine, now=True) as tx:
        _add(tx, "tcall_1")
    assert _ids(engine) == ["tcall_1"]
