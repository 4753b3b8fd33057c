"""The call path's statements run straight on the database driver.

A call's hot statements (the key's lookup, the live nodes, admission, the finish, the Idempotency-Key's
claim) are SQLAlchemy Core statements built once. SQLAlchemy's execution of one costs about ten times
the driver's own (on this project's machine ~120 us against ~12 us for the same query on SQLite: its
execution context, events, result object), and that was about a third of the api's CPU per call. So
each is compiled once per dialect and statement shape (SQLAlchemy writes the SQL, the parameters' order
and each type's conversion: `UTCDateTime`, JSON, booleans, exactly as SQLAlchemy's own execution would),
and runs on the connection's DBAPI cursor. Driver errors come out as SQLAlchemy's (`IntegrityError`,
`OperationalError`, ...), and a connection the database dropped is invalidated as SQLAlchemy would.

Transactions stay SQLAlchemy's: `execute` runs a statement inside a session's transaction (on SQLite
`BEGIN IMMEDIATE` after the writers' turn, `api.db`), and `Reads` runs single-statement reads on a
pooled driver connection without a transaction of their own (on SQLite each statement reads one
consistent snapshot; a version, once published, never changes, so reads that span statements need no
common one).

Statements with Python-side column defaults or expanding (`IN`) parameters are refused when first
compiled: their SQL depends on each execution's values.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import Insert, Update
from sqlmodel import Session

from api.db import read_session

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
            invalidated = dialect.is_disconnect(exc, raw.driver_connection, cursor)
            if invalidated:
                raw.invalidate(exc)
            raise _wrapped(exc, dialect, plan.sql, invalidated) from exc
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


def execute(session: Session, stmt: Executable, params: Params | Sequence[Params] | None = None) -> Outcome:
    """Run `stmt` in the session's transaction (which begins now if it has not: on SQLite the writers'
    turn and `BEGIN IMMEDIATE`, `api.db`)."""
    connection = session.connection()
    return run(connection.connection, connection.dialect, stmt, params)


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
