"""Database engines and sessions. Nothing is built at import time.

SQLite (the default) runs in WAL mode with `synchronous=NORMAL` (a commit is durable once the WAL is
synced at a checkpoint: a power cut may lose the last commits, never consistency), a busy timeout,
foreign keys on, and every transaction begun with `BEGIN IMMEDIATE`, so concurrent writers queue
instead of failing with "database is locked" when a read turns into a write; within a process they
queue in order (`WritersTurn`) before they ask SQLite. The price: on SQLite an
open transaction holds the write lock, so end transactions (commit or close the session) before any
slow wait. A session that only reads (`read_session`) begins a deferred transaction instead and
never waits for, nor holds, the write lock. The call path's short writes begin on the driver
(`api.rawsql.Writes`), holding the same turn (`writers_turn`): at once or not at all on the event loop
(else `WriterBusy`, having waited for nothing), in turn in a worker thread.
PostgreSQL goes through psycopg 3 (`postgresql+psycopg://`).
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlmodel import Session
from starlette.requests import Request

from api.config import Settings, checked_database_url

T = TypeVar("T")
log = logging.getLogger("b3os.api")

SQLITE_POOL_SIZE = 10
SQLITE_POOL_OVERFLOW = 50
"""More SQLite connections than the threads that may use them (anyio's 40 worker threads, plus the event
loop's own): a writer holds its connection while it waits for its turn (`WritersTurn`), and with
SQLAlchemy's default pool (5 + 10) a burst of writers took every connection, so reads and other writers
waited 30 s for one and answered 500 (`QueuePool limit ... reached`). A SQLite connection costs a file
handle and a page cache that fills only as it reads; waiting is now the gate's, in arrival order."""


def make_engine(url: str) -> Engine:
    """Build an engine for a SQLAlchemy URL (SQLite file, or PostgreSQL via psycopg 3).

    Raises:
        ValueError: the URL names no database b3os runs on (`api.config.checked_database_url`).
    """
    parsed = make_url(checked_database_url(url, "the database URL"))
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
        _quiet_lost_connections(engine.dialect.loaded_dbapi.OperationalError)
        return engine
    database = Path(str(parsed.database))  # a file: checked_database_url refuses an in-memory one
    _private_file(database)
    engine = create_engine(
        parsed,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=SQLITE_POOL_SIZE,
        max_overflow=SQLITE_POOL_OVERFLOW,
    )
    gate = WritersTurn(Path(f"{database}-writer"))
    _TURNS[engine] = gate
    weakref.finalize(engine, os.close, gate.file)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", gate.begin)
    event.listen(engine, "commit", gate.end)
    event.listen(engine, "rollback", gate.end)
    return engine


class _LostConnection(logging.Filter):
    """A pooled connection the server closed (a restart, an administrator's `pg_terminate_backend`) fails
    its rollback when it goes back to the pool; SQLAlchemy then logs an ERROR with a traceback, though it
    only drops that connection (`pool_pre_ping` replaces it at the next checkout). That record becomes one
    WARNING line naming the error; any other pool error keeps its traceback."""

    def __init__(self, driver_error: type[BaseException]) -> None:
        super().__init__()
        self.lost = (OperationalError, InterfaceError, driver_error)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, self.lost):
            first_line = (str(error).strip().splitlines() or [""])[0]
            record.msg, record.args = (
                "a pooled database connection was lost and dropped (%s: %s)",
                (
                    type(error).__name__,
                    first_line,
                ),
            )
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_lost_connections(driver_error: type[BaseException]) -> None:
    pool_log = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
    if not any(isinstance(f, _LostConnection) for f in pool_log.filters):
        pool_log.addFilter(_LostConnection(driver_error))


def _private_file(path: Path) -> None:
    """Create the SQLite file 0600 in a 0700 directory when it is new (its WAL and shm files take the
    file's mode): nobody but the api's user reads keys' hashes, calls and runs."""
    for parent in reversed(list(path.parents)):
        if not parent.exists():
            parent.mkdir(mode=0o700, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control away from the driver so `begin` below decides how a transaction starts.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # busy_timeout first: switching a new file to WAL takes a lock another starter may hold at that moment
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    # SQLite does not call the busy handler for this switch: a connection racing another one's switch on a
    # new file is told "database is locked" at once. Try again for up to 10 s (the switch lasts moments).
    for _ in range(200):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.05)
    cursor.execute("PRAGMA journal_mode=WAL")


_READS_ONLY = "b3os_reads_only"


class WriterBusy(Exception):
    """The writers' turn was not free at that moment (a write that was to begin at once did not)."""


BUSY_TIMEOUT_MS = 30_000
"""How long SQLite waits for a lock another connection holds before it answers "database is locked"."""
GATE_WAIT_S = 30.0
"""How long a writer waits for its turn in the process (and again between processes) before it asks SQLite
anyway (its busy timeout)."""
FILE_POLL_MAX_S = 0.002
"""The longest pause between two tries of the file lock of the writers' turn between processes."""


class WritersTurn:
    """One write transaction at a time per database file, in arrival order within a process, taking turns
    fairly between processes.

    SQLite lets one writer in at a time anyway; without the turn every thread of the process would wait in
    SQLite's busy handler, which sleeps and polls (up to 100 ms between tries, first come not first
    served), while the writer that holds the lock waits for the GIL behind them. Queued here, a writer
    gets the lock as soon as the previous one commits.

    Between processes, the busy handler's sleeps starved the other process: while one api process had a
    queue of writers, each took SQLite's lock the moment the previous one let go, and the other process's
    writer, asleep in its busy handler for up to 100 ms, seldom found it free (in a burst of routine runs
    dozens of its calls waited the 30 s busy timeout and answered 503). So the process's writer in turn
    also takes an advisory lock (`flock`) on a file beside the database (`<file>-writer`) before `BEGIN
    IMMEDIATE`, polling it every millisecond or so: the kernel, not a 100 ms sleep, tells the other process
    it is free. Read-only transactions (`read_session`) never take it.

    A session's write transaction takes it as it begins (the engine's `begin` event) and gives it back as
    it ends; a write begun on the driver (`api.rawsql.Writes`) calls `take` and `give` itself.
    """

    def __init__(self, lock_file: Path) -> None:
        self._lock = threading.Lock()
        self._holder: Any = None
        self.file = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)

    def begin(self, connection: Any) -> None:
        if connection.get_execution_options().get(_READS_ONLY, False):
            connection.exec_driver_sql("BEGIN")
            return
        self.take(connection)
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.give(connection)
            raise

    def take(self, holder: object, *, now: bool = False) -> None:
        """Take the turn for `holder`: in arrival order, waiting up to `GATE_WAIT_S` in the process and as
        long again for the other processes (then SQLite's busy timeout decides); with `now`, at once or
        not at all (`WriterBusy`, having waited for nothing)."""
        if now:
            if not self._lock.acquire(blocking=False):
                raise WriterBusy
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock.release()
                raise WriterBusy from None
            self._holder = holder
        elif self._lock.acquire(timeout=GATE_WAIT_S):
            self._holder = holder
            self._take_file()

    def end(self, connection: Any) -> None:
        self.give(connection)

    def _take_file(self) -> None:
        give_up, pause = time.monotonic() + GATE_WAIT_S, 0.0005
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > give_up:
                    return  # ask SQLite anyway (its busy timeout), as after the in-process wait
            time.sleep(pause)
            pause = min(2 * pause, FILE_POLL_MAX_S)

    def give(self, holder: object) -> None:
        """Give the turn back, if `holder` holds it (a reader, or a writer let in after a timeout, holds
        nothing)."""
        if self._holder is holder:
            self._holder = None
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self._lock.release()


_TURNS: weakref.WeakKeyDictionary[Engine, WritersTurn] = weakref.WeakKeyDictionary()


def writers_turn(engine: Engine) -> WritersTurn | None:
    """The writers' turn of a SQLite engine's database file (None for PostgreSQL, whose writers wait on
    their rows' locks): a write transaction begun on the driver (`api.rawsql.Writes`) takes it as a
    session's does."""
    return _TURNS.get(engine)


@functools.lru_cache(maxsize=32)
def _reader(engine: Engine) -> Engine:
    return engine.execution_options(**{_READS_ONLY: True})


def read_session(engine: Engine) -> Session:
    """A session for reads only: on SQLite its transactions begin deferred, so they neither wait for nor
    hold the write lock. Keep writes out of it (a write would have to upgrade the lock mid-transaction,
    which is what `BEGIN IMMEDIATE` exists to avoid)."""
    return Session(_reader(engine), expire_on_commit=False)


async def run_reading(engine: Engine, fn: Callable[[], T]) -> T:
    """Run `fn`, which only reads `engine` (`read_session`s): on SQLite on the event loop itself,
    elsewhere in a worker thread.

    A deferred read on SQLite in WAL mode waits for no lock and takes well under a millisecond, less
    than the thread hop it saves (hops were the larger part of a call's database time in the api's
    profile); a PostgreSQL read is a network round trip and stays off the loop.
    """
    if engine.dialect.name == "sqlite":
        return fn()
    return await anyio.to_thread.run_sync(fn)


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a worker thread: database work of the services, off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def engine_from_settings(settings: Settings) -> Engine:
    """The engine of the database the settings name."""
    return make_engine(settings.resolved_database_url())


def is_postgres(engine: Engine) -> bool:
    """Whether the engine talks to PostgreSQL."""
    return engine.dialect.name == "postgresql"


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session on the app's engine for one request (a dependency), closed once the answer is made.

    On SQLite a transaction holds the process's writers' turn (`WritersTurn`) until it ends, so a route
    on this session commits its writes before it returns, and a route that only reads takes
    `get_read_session`. Beside 20 runs of 60 calls each, a node's registry poll read in this session and
    held the turn while FastAPI serialized its answer in a worker thread, and all 40 worker threads were
    writers waiting for that turn: every write of the process waited `GATE_WAIT_S` (30 s). For the same
    reason the close never waits for a worker thread on SQLite (it runs on the loop: a ROLLBACK in
    memory, or nothing). A database that went away by then (its ROLLBACK fails) is not the request's
    error, and SQLAlchemy has already dropped the dead connection.
    """
    session = Session(request.app.state.engine, expire_on_commit=False)
    try:
        yield session
    finally:
        await _close(session)


async def get_read_session(request: Request) -> AsyncIterator[Session]:
    """A `read_session` for one request (a dependency) that only reads: on SQLite it neither waits for nor
    holds the writers' turn, so a read route (a node's registry poll, a list) never keeps writers waiting
    (FastAPI serializes a sync route's answer in a worker thread before the session is closed)."""
    session = read_session(request.app.state.engine)
    try:
        yield session
    finally:
        await _close(session)


async def _close(session: Session) -> None:
    try:
        if session.get_bind().dialect.name == "sqlite":
            session.close()
        else:
            await anyio.to_thread.run_sync(session.close)
    except (OperationalError, InterfaceError) as exc:
        log.warning("a request's database session closed on a lost connection: %s", type(exc).__name__)
