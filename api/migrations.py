"""Schema migrations with alembic: the revisions in `api/alembic/versions/`, applied under a lock.

`migrate(engine)` brings a database to the newest revision (head) in one transaction that holds a
lock: a PostgreSQL advisory lock, or SQLite's write lock (every SQLite transaction begins `BEGIN
IMMEDIATE`). Of several api processes starting on one database, one migrates; the others wait and
then find nothing to do. On SQLite, foreign keys are off while the revisions run (a batch ALTER
copies a table and drops the old one) and are checked before the commit.

A database made by the migrations before alembic (a `schema_version` table and no
`alembic_version`) is adopted: at their last version, 5, it is stamped at the baseline revision
without running anything; at an older one, the baseline creates only the tables it lacks. Its
`schema_version` table is left as it was.

The alembic configuration is built here; no alembic.ini is read at run time. How to add a revision:
docs/api.md, Settings (and set `HEAD` to it: a test checks they agree). A database already at `HEAD`
is found so with one query, without loading alembic (about half a second of an api process's start).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, MetaData, inspect, text
from sqlalchemy.exc import DBAPIError

from api.db import is_postgres

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_DIR = Path(__file__).resolve().parent / "alembic"
HEAD = "0016_usage_sums"
"""The newest revision in api/alembic/versions (tests/api/test_api_errors.py checks it)."""
BASELINE = "0001_baseline"
LEGACY_TABLE = "schema_version"
LEGACY_LAST_VERSION = 5
_LOCK_ID = 0x6233_6F73  # "b3os"


class MigrationError(RuntimeError):
    """The schema cannot be brought to head: an unknown old version, or rows that break a foreign key."""


def alembic_config(connection: Connection | None = None) -> Config:
    """The alembic configuration of the api's schema, running on `connection` when one is given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision, as alembic finds it in api/alembic/versions."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "api/alembic/versions holds no revision"
    return head


def api_metadata() -> MetaData:
    """The metadata of every table of the api's models (what the head revision must match)."""
    from sqlmodel import SQLModel

    from api import models  # noqa: F401  (each import registers its tables)
    from api.calls import tables as call_tables  # noqa: F401
    from api.connections import tables as connection_tables  # noqa: F401
    from api.routines import tables as routine_tables  # noqa: F401
    from api.runs import tables as run_tables  # noqa: F401
    from api.schedules import tables as schedule_tables  # noqa: F401
    from api.triggers import tables as trigger_tables  # noqa: F401

    return SQLModel.metadata


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None when alembic never ran on it)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _at_head(engine: Engine) -> bool:
    """Whether the database is at `HEAD` already (one query; no alembic_version table: no)."""
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except DBAPIError:
        return False
    return found == [HEAD]


def legacy_version(engine: Engine) -> int | None:
    """The `schema_version` of a database made before alembic and not yet adopted, else None."""
    with engine.connect() as conn:
        return _legacy_version(conn)


def _legacy_version(conn: Connection) -> int | None:
    tables = set(inspect(conn).get_table_names())
    if LEGACY_TABLE not in tables or "alembic_version" in tables:
        return None
    return int(conn.execute(text(f"SELECT COALESCE(MAX(version), 0) FROM {LEGACY_TABLE}")).scalar_one())


def migrate(engine: Engine) -> str:
    """Bring the database to the head revision under the lock, and return that revision.

    Raises:
        MigrationError: an old `schema_version` this code does not know, or rows that break a
            foreign key after the revisions ran (SQLite); nothing is changed then.
    """
    if _at_head(engine):
        return HEAD
    from alembic.runtime.migration import MigrationContext

    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        if sqlite:
            _sqlite_foreign_keys(conn, on=False)
        try:
            with conn.begin():
                if is_postgres(engine):
                    conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
                _upgrade(conn)
                if sqlite:
                    _check_foreign_keys(conn)
                revision = MigrationContext.configure(conn).get_current_revision()
        finally:
            if sqlite:
                _sqlite_foreign_keys(conn, on=True)
    assert revision is not None
    return revision


def _upgrade(conn: Connection) -> None:
    from alembic import command

    config = alembic_config(conn)
    legacy = _legacy_version(conn)
    if legacy == LEGACY_LAST_VERSION:
        command.stamp(config, BASELINE)
    elif legacy is not None:
        if not 0 <= legacy < LEGACY_LAST_VERSION:
            raise MigrationError(
                f"the database's schema_version is {legacy}, which no b3os release made "
                f"(the last was {LEGACY_LAST_VERSION}); it is left unchanged"
            )
        config.attributes["legacy_schema_version"] = legacy
    command.upgrade(config, "head")


def _sqlite_foreign_keys(conn: Connection, *, on: bool) -> None:
    # The pragma does nothing inside a transaction: set it on the driver's connection before ours begins.
    driver = conn.connection.driver_connection
    assert driver is not None
    driver.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def _check_foreign_keys(conn: Connection) -> None:
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise MigrationError(
            f"after the migration, {len(broken)} row(s) break a foreign key "
            f"(first: {table} row {rowid} names a missing {parent}); nothing was changed"
        )
