"""How the call path runs its database work, handed to the call service, its executors and cancels alike.

- `run`: a transaction in a worker thread (a session that does not expire its objects on commit);
- `read`: reads only, in a read session (on SQLite deferred: it neither waits for nor holds the write
  lock), on the loop on SQLite (`api.db.run_reading`);
- `write`: a call's short write transactions (its key's claim, its admission, its finish). On SQLite they
  begin on the driver (`api.rawsql.Writes`, no ORM session: 12-16% of the api's CPU a call): at once on
  the event loop when the writers' turn is free at that moment, else in a worker thread, waiting for it
  (the two thread hops a call made for them were a tenth of the api's CPU a call). Elsewhere a session
  in a worker thread, as `run`;
- `record`: a write that must not be lost (a call's outcome, a claim's release): while the database
  cannot be reached, tried again every `RECORD_RETRY_S`, up to `lease_grace_s`. Otherwise a call that ran
  would keep its lease and its key's claim until they expired, and its retry would wait that long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlmodel import Session

from api.db import WriterBusy, read_session, run_reading, writers_turn
from api.rawsql import Transaction, Writes, transaction

RECORD_RETRY_S = 1.0


class CallSessions:
    """The database work of the call path, over one engine."""

    def __init__(self, engine: Engine, *, lease_grace_s: float) -> None:
        self.engine = engine
        self._sqlite = writers_turn(engine) is not None
        self._lease_grace_s = lease_grace_s

    async def run(self, fn: Callable[[Session], Any]) -> Any:
        """`fn(session)` in a worker thread."""

        def run() -> Any:
            with Session(self.engine, expire_on_commit=False) as session:
                return fn(session)

        return await anyio.to_thread.run_sync(run)

    async def read(self, fn: Callable[[Session], Any]) -> Any:
        """`fn(session)` over a read session: it must only read."""

        def read() -> Any:
            with read_session(self.engine) as session:
                return fn(session)

        return await run_reading(self.engine, read)

    async def write(self, fn: Callable[[Transaction], Any]) -> Any:
        """A short write transaction `fn(tx)`: on SQLite on the loop when the writers' turn is free now,
        else in a worker thread (`fn` may be run again there from its start: `api.rawsql.Writes`)."""
        if self._sqlite:
            try:
                with Writes(self.engine, now=True) as tx:
                    return fn(tx)
            except WriterBusy:
                pass  # its transactions were rolled back, or did not begin

        def in_thread() -> Any:
            with transaction(self.engine) as tx:
                return fn(tx)

        return await anyio.to_thread.run_sync(in_thread)

    async def record(self, fn: Callable[[Transaction], Any]) -> Any:
        """`write` for a write that must not be lost: tried again while the database cannot be reached."""
        give_up = time.monotonic() + self._lease_grace_s
        while True:
            try:
                return await self.write(fn)
            except (OperationalError, InterfaceError):
                if time.monotonic() > give_up:
                    raise
            await asyncio.sleep(RECORD_RETRY_S)
