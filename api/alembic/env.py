"""The alembic environment: runs the revisions on the connection `api.migrations` hands over.

`api.migrations.migrate` passes its connection (inside its transaction and lock) as
`config.attributes["connection"]`. The `alembic` command in a checkout (configured by
pyproject.toml's `[tool.alembic]`) has none: it opens the database named by `B3OS_DATABASE_URL` /
`DATABASE_URL` (default `.b3os/b3os.db`), for `alembic revision --autogenerate`, `current` and
`history`; apply revisions with `b3os admin migrate`, which takes the lock. Autogenerate compares
with every table of the api and writes plain SQLAlchemy types, so a new revision never imports the
models; it writes batch operations, which SQLite needs for an ALTER.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection
from sqlmodel.sql.sqltypes import AutoString

from api.migrations import api_metadata
from api.models import UTCDateTime


def _render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | bool:
    """Write the api's own column types as the SQLAlchemy types they store as."""
    if type_ != "type":
        return False
    if isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if isinstance(obj, AutoString):
        return f"sa.String(length={obj.length})" if obj.length else "sa.String()"
    return False


def _options() -> dict[str, Any]:
    return {
        "target_metadata": api_metadata(),
        "render_as_batch": True,
        "render_item": _render_item,
        "compare_type": True,
    }


def _run(connection: Connection) -> None:
    context.configure(connection=connection, **_options())
    with context.begin_transaction():
        context.run_migrations()


def _database_url() -> str:
    from api.config import Settings

    return Settings().resolved_database_url()


def main() -> None:
    """Run the revisions online (on a connection) or offline (`alembic upgrade --sql`: print the SQL)."""
    if context.is_offline_mode():
        context.configure(url=_database_url(), literal_binds=True, **_options())
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from api.db import make_engine

    engine: sa.Engine = make_engine(_database_url())
    try:
        with engine.begin() as own:
            _run(own)
    finally:
        engine.dispose()


main()
