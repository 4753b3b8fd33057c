"""Liveness: answers when the api is up and its database answers.

A liveness probe must answer while the api is busy, so `/healthz` never waits for a worker thread:
on SQLite it asks the database on the event loop through a read-only connection of its own (a read
of the schema's first page, microseconds; in WAL mode a reader waits neither for writers nor for the
connection pool), and only PostgreSQL's network round trip goes to a worker thread. A database that
does not answer is the one error of every route: 503 `unavailable`, reason `database`.
"""

from __future__ import annotations

import sqlite3
from urllib.parse import quote

from anyio import to_thread
from fastapi import APIRouter, Request
from pydantic import BaseModel
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

router = APIRouter(tags=["health"])

PROBE = "SELECT count(*) FROM sqlite_master"
BUSY_TIMEOUT_MS = 100
"""The longest the probe waits on SQLite (only a WAL recovery or an exclusive lock makes it wait)."""


class Health(BaseModel):
    ok: bool


class DatabaseProbe:
    """`/healthz`'s question to the database of one app."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        database = engine.url.database
        local = engine.dialect.name == "sqlite" and database not in (None, "", ":memory:")
        self._sqlite_path = database if local else None
        self._connection: sqlite3.Connection | None = None

    async def check(self) -> None:
        """Return when the database answers; raise OperationalError when it does not."""
        if self._sqlite_path is None:
            await to_thread.run_sync(self._pooled)
            return
        try:
            if self._connection is None:
                uri = f"file:{quote(self._sqlite_path)}?mode=ro"  # a path may hold '?', '#' or '%'
                self._connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
                self._connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._connection.execute(PROBE).fetchone()
        except sqlite3.Error as exc:
            self.close()  # the next probe opens it again (a file replaced, a disk back)
            raise OperationalError(PROBE, None, exc) from None

    def _pooled(self) -> None:
        with self._engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


@router.get("/healthz", response_model=Health)
async def healthz(request: Request) -> Health:
    """The api is up and its database answers."""
    probe: DatabaseProbe = request.app.state.health
    await probe.check()
    return Health(ok=True)
