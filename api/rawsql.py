"""The call path's statements run straight on the database driver.

A call's hot statements (the key's lookup, the live nodes, admission, the finish, the Idempotency-Key's
claim) are SQLAlchemy Core statements built once. SQLAlchemy's execution of one costs about ten times
the driver's own (on this project's machine ~120 us against ~12 us for the same query on SQLite: its
execution context, events, result object), and that was about a third of the api's CPU per call. So
each is compiled once per dialect and statement shape (SQLAlchemy writes the SQL, the parameters' order
and each type's conversion: `UTCDateTime`, JSON, booleans, exactly as SQLAlchemy's own execution would),
and runs on the connection's DBAPI cursor. Driver errors come out as SQLAlchemy's (`IntegrityError`,
`OperationalError`, ...), and a connection the database dropped is invalidated as SQLAlchemy would.

`execute` runs a statement inside a `Transaction`: a session's (on SQLite `BEGIN IMMEDIATE` after the
writers' turn, `api.db`), or, on SQLite, one of `Writes`, which begins and commits on the driver
holding the same turn: the call path's short writes, whose ORM session (its transaction's state, the
pool's events, the engine's `begin` and `commit`) cost as much as their statements, 12-16% of the
api's CPU a call. `Reads` runs single-statement reads on a pooled driver connection without a
transaction of their own (on SQLite each statement reads one consistent snapshot; a version, once
published, never changes, so reads that span statements need no common one).

Statements with Python-side column defaults or expanding (`IN`) parameters are refused when first
compiled: their SQL depends on each execution's values.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert, Update
from sqlmodel import Session

from api.db import BUSY_TIMEOUT_MS, WriterBusy, read_session, writers_turn

Params = Mapping[str, Any]


@dataclass(frozen=True)
class _Plan:
    sql: str
    compiled: SQLCompiler
    order: tuple[str, ...] | None  # positional dialects: the binds' names in order
    binds: dict[str, Callable[[Any], Any]]  # a bind's conversion, when its type has one
    results: tuple[Callable[[Any], Any] | None, ...]
    row: type | None  # a named tuple of the selected columns (None: no rows)

    def args(self, params: Params) -> Any:
        values = self.compiled.construct_params(params)
        for name, convert in self.binds.items():
            values[name] = convert(values[name])
        return values if self.order is None else tuple(values[name] for name in self.order)


_plans: dict[tuple[int, str, tuple[str, ...]], tuple[Executable, _Plan]] = {}  # per dialect and driver


def _plan(stmt: Executable, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
    cache_key = (id(stmt), f"{dialect.name}+{dialect.driver}", keys)
    found = _plans.get(cache_key)
    if found is not None and found[0] is stmt:
        return found[1]
    plan = _compile(stmt, dialect, keys)
    _plans[cache_key] = (stmt, plan)  # the statement is kept: its id is not reused while it is cached
    return plan


def _compile(stmt: Executable, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
    dml = isinstance(stmt, (Insert, Update))
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if dml else None)  # type: ignore[attr-defined]
    assert isinstance(compiled, SQLCompiler)
    if compiled.insert_prefetch or compiled.update_prefetch:
        raise ValueError(f"{stmt}: its columns' Python-side defaults need SQLAlchemy's execution")
    if "__[POSTCOMPILE_" in compiled.string:
        raise ValueError(f"{stmt}: an expanding parameter's SQL depends on its values")
    binds: dict[str, Callable[[Any], Any]] = {}
    for bind, name in compiled.bind_names.items():
        convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if convert is not None:
            binds[name] = convert
    columns = list(getattr(stmt, "selected_columns", ()))
    return _Plan(
        sql=compiled.string,
        compiled=compiled,
        order=tuple(compiled.positiontup or ()) if compiled.positional else None,
        binds=binds,
        results=tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns),
        row=collections.namedtuple("Row", [c.key for c in columns], rename=True) if columns else None,  # type: ignore[misc]
    )


def _wrapped(exc: Exception, dialect: Dialect, sql: str | None, invalidated: bool) -> BaseException:
    """A driver's error as SQLAlchemy raises it (`OperationalError`, `IntegrityError`, ...)."""
    return DBAPIError.instance(
        sql, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=invalidated, dialect=dialect
    )


def _failed(exc: Any, raw: Any, dialect: Dialect, sql: str, cursor: Any) -> BaseException:
    """A statement's driver error as SQLAlchemy's, its connection invalidated if the database dropped it."""
    invalidated = dialect.is_disconnect(exc, raw.driver_connection, cursor)
    if invalidated:
        raw.invalidate(exc)
    return _wrapped(exc, dialect, sql, invalidated)


@dataclass(frozen=True)
class Outcome:
    """What a statement gave: its rows (named tuples of the selected columns) and the rows it changed."""

    rows: list[Any]
    rowcount: int

    def first(self) -> Any:
        """The first row, or None."""
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self.rows[0][0] if self.rows else None


def run(
    raw: Any, dialect: Dialect, stmt: Executable, params: Params | Sequence[Params] | None = None
) -> Outcome:
    """Run `stmt` on a pooled DBAPI connection (`raw`): with a list of parameter sets, once for each
    (`executemany`, no rows)."""
    params = {} if params is None else params
    many = isinstance(params, Sequence)
    sets: Sequence[Params] = params if isinstance(params, Sequence) else [params]
    if many and not sets:
        return Outcome([], 0)
    plan = _plan(stmt, dialect, tuple(sets[0]))
    cursor = raw.driver_connection.cursor()
    try:
        try:
            if many:
                cursor.executemany(plan.sql, [plan.args(p) for p in sets])
            else:
                cursor.execute(plan.sql, plan.args(sets[0]))
            fetched = cursor.fetchall() if plan.row is not None and cursor.description else []
        except dialect.loaded_dbapi.Error as exc:
            raise _failed(exc, raw, dialect, plan.sql, cursor) from exc
        rowcount = cursor.rowcount
    finally:
        cursor.close()
    if plan.row is None:
        return Outcome([], rowcount)
    make, results = plan.row._make, plan.results  # type: ignore[attr-defined]
    if not any(results):
        return Outcome([make(r) for r in fetched], rowcount)
    return Outcome(
        [make([v if f is None else f(v) for f, v in zip(results, r, strict=True)]) for r in fetched], rowcount
    )


class Transaction(Protocol):
    """What the call path's writes ask of their transaction: a `Session`'s, or a `Writes`'."""

    def connection(self) -> Any:
        """The transaction's connection (begun now if it was not): its `.connection` is the pooled DBAPI
        connection, its `.dialect` the engine's."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def get_bind(self) -> Any:
        """The engine."""


def execute(tx: Transaction, stmt: Executable, params: Params | Sequence[Params] | None = None) -> Outcome:
    """Run `stmt` in the transaction (which begins now if it has not: on SQLite the writers' turn and
    `BEGIN IMMEDIATE`, `api.db`)."""
    connection = tx.connection()
    return run(connection.connection, connection.dialect, stmt, params)


@dataclass(frozen=True)
class _Bound:
    connection: Any  # the pooled DBAPI connection
    dialect: Dialect


class Writes:
    """Write transactions on one pooled SQLite driver connection, holding the database's writers' turn
    (`api.db.writers_turn`) from start to end: a `Transaction` for the call path's short writes.

    With `now` the turn is taken at once or not at all (`WriterBusy`, before anything ran), and so is
    the write lock itself: a writer outside the turn (a migration, a tool) makes it `WriterBusy` too,
    never a wait. A function run in one may be run again, from its start, elsewhere (the call path runs
    it in a worker thread then): it must have no effect but its transactions'. Without `now` (in a
    worker thread) the turn is waited for, as a session's write waits.

    A transaction begins at once, and again at the first statement after a commit or a rollback; the
    turn is given back when the `with` block ends (rolling back what was not committed).
    """

    def __init__(self, engine: Engine, *, now: bool) -> None:
        turn = writers_turn(engine)
        if turn is None:
            raise ValueError(f"{engine.dialect.name}: driver transactions are SQLite's only")
        self.engine = engine
        self._turn = turn
        self._now = now
        self._bound: _Bound | None = None
        self._begun = False

    def __enter__(self) -> Writes:
        self._turn.take(self, now=self._now)
        dialect = self.engine.dialect
        try:
            try:
                raw = self.engine.raw_connection()
            except dialect.loaded_dbapi.Error as exc:  # the database cannot be reached
                raise _wrapped(exc, dialect, None, True) from exc
            self._bound = _Bound(raw, dialect)
            self.connection()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            if self._bound is not None:
                try:
                    with contextlib.suppress(DBAPIError):  # a lost connection: the pool drops it
                        self.rollback()
                finally:
                    self._bound.connection.close()  # back to the pool
        finally:
            self._bound = None
            self._turn.give(self)

    def connection(self) -> _Bound:
        """The connection, its transaction begun (`BEGIN IMMEDIATE`)."""
        assert self._bound is not None, "a Writes is used inside its with block"
        if not self._begun:
            driver = self._bound.connection.driver_connection
            if not self._now:
                self._driver("BEGIN IMMEDIATE")
            else:
                driver.execute("PRAGMA busy_timeout=0")  # a writer outside the turn: no wait
                try:
                    self._driver("BEGIN IMMEDIATE")
                except OperationalError as exc:
                    if "locked" in str(exc.orig):
                        raise WriterBusy from None
                    raise
                finally:
                    driver.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._begun = True
        return self._bound

    def commit(self) -> None:
        """Commit the transaction under way, if any."""
        if self._begun:
            self._begun = False
            self._driver("COMMIT")

    def rollback(self) -> None:
        """Roll back the transaction under way, if any."""
        if self._begun:
            self._begun = False
            self._driver("ROLLBACK")

    def get_bind(self) -> Engine:
        """The engine."""
        return self.engine

    def _driver(self, sql: str) -> None:
        assert self._bound is not None
        raw, dialect = self._bound.connection, self._bound.dialect
        try:
            raw.driver_connection.execute(sql)
        except dialect.loaded_dbapi.Error as exc:
            raise _failed(exc, raw, dialect, sql, None) from exc


@contextlib.contextmanager
def transaction(engine: Engine) -> Iterator[Transaction]:
    """A write transaction for a worker thread, rolled back unless committed: on SQLite a `Writes`
    (waiting for the writers' turn), elsewhere an ORM session (its objects kept readable after commit)."""
    if writers_turn(engine) is None:
        with Session(engine, expire_on_commit=False) as session:
            yield session
    else:
        with Writes(engine, now=False) as tx:
            yield tx


class Reads:
    """Reads on one pooled driver connection, each statement its own snapshot (see the module's
    docstring); `session()` opens a read-only ORM session beside it for the rare read that wants one.
    Use as a context manager."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._raw: Any = None
        self._session: Session | None = None

    def __enter__(self) -> Reads:
        dialect = self.engine.dialect
        try:
            self._raw = self.engine.raw_connection()
        except dialect.loaded_dbapi.Error as exc:  # the database cannot be reached
            raise _wrapped(exc, dialect, None, True) from exc
        return self

    def __exit__(self, *_: object) -> None:
        try:
            if self._session is not None:
                self._session.close()
        finally:
            self._raw.close()  # back to the pool, which rolls back whatever the driver began

    def run(self, stmt: Executable, params: Params | None = None) -> Outcome:
        """Run one read."""
        return run(self._raw, self.engine.dialect, stmt, params or {})

    def session(self) -> Session:
        """A read-only session of the same engine, closed with these reads."""
        if self._session is None:
            self._session = read_session(self.engine)
        return self._session
