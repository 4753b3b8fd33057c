"""Versioned schema migrations: SQLModel metadata plus a `schema_version` table.

Each `Migration` creates the named tables from the SQLModel metadata and then runs its extra
statements (`ALTER TABLE ...`). `migrate(engine)` applies, in order and in one transaction each,
every migration newer than the recorded version; concurrent starters serialize on a lock
(PostgreSQL advisory lock; SQLite's write lock). Later work appends migrations, never edits one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text
from sqlmodel import Field, SQLModel, select

from api import models  # noqa: F401  (registers the tables in the metadata)
from api.calls import tables as call_tables
from api.connections import tables as connection_tables
from api.db import is_postgres
from api.models import UTCDateTime, utcnow
from api.runs import tables as run_tables

_LOCK_ID = 0x6233_6F73  # "b3os"


class SchemaVersion(SQLModel, table=True):
    __tablename__ = "schema_version"
    version: int = Field(primary_key=True)
    description: str
    applied_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


@dataclass(frozen=True)
class Migration:
    """One step of the schema: tables to create from the metadata, then extra SQL statements."""

    version: int
    description: str
    tables: tuple[str, ...] = ()
    statements: tuple[str, ...] = ()


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "organizations, api keys, publishers, signing keys, blobs, packs, pack versions, nodes",
        tables=(
            "organizations",
            "api_keys",
            "publishers",
            "signing_keys",
            "blob_uploads",
            "packs",
            "pack_versions",
            "nodes",
        ),
    ),
    Migration(2, "action calls: tool_calls, meter_events, idempotency_records", tables=call_tables.TABLES),
    Migration(3, "routines and their runs: routines, routine_runs", tables=run_tables.TABLES),
    Migration(4, "cancels of running calls: call_cancels", tables=call_tables.CANCEL_TABLES),
    Migration(5, "connections of declarative packs: connections", tables=connection_tables.TABLES),
)


def current_version(engine: Engine) -> int:
    """The newest applied migration (0 for an empty database)."""
    with engine.connect() as conn:
        if not engine.dialect.has_table(conn, SchemaVersion.__tablename__):
            return 0
        return _recorded(conn)


def _recorded(conn: Connection) -> int:
    versions = conn.execute(select(SchemaVersion.version)).scalars().all()  # type: ignore[call-overload]
    return max(versions, default=0)


def migrate(engine: Engine) -> int:
    """Apply every pending migration and return the schema version."""
    version = 0
    for migration in (None, *MIGRATIONS):
        with engine.begin() as conn:
            if is_postgres(engine):
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
            SQLModel.metadata.tables[SchemaVersion.__tablename__].create(conn, checkfirst=True)
            version = _recorded(conn)
            if migration is None or migration.version <= version:
                continue
            for name in migration.tables:
                SQLModel.metadata.tables[name].create(conn, checkfirst=True)
            for statement in migration.statements:
                conn.execute(text(statement))
            conn.execute(
                SQLModel.metadata.tables[SchemaVersion.__tablename__].insert(),
                {"version": migration.version, "description": migration.description, "applied_at": utcnow()},
            )
            version = migration.version
    return version
