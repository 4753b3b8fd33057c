"""How the call path runs its database work, handed to the call service, its executors and cancels alike.

- `run`: a transaction in a worker thread (a session that does not expire its objects on commit);
- `read`: reads only, in a read session (on SQLite deferred: it neither waits for nor holds the write
  lock), on the loop on SQLite (`api.db.run_reading`);
- `write`: a call's short write transactions (its key's claim, its admission, its finish): on SQLite at
  once on the event loop when the writers' turn is free at that moment (api.db.now_or_never), else in a
  worker thread as `run`. The two thread hops a call made for them were a tenth of the api's CPU a call;
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

from api.db import WriterBusy, now_or_never, read_session, run_reading

RECORD_RETRY_S = 1.0


class CallSessions:
    """The database work of the call path, over one engine."""

    def __init__(self, engine: Engine, *, lease_grace_s: float) -> None:
        self.engine = engine
        self._now = now_or_never(engine)  # SQLite: short writes on the loop when their turn is free
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

    async def write(self, fn: Callable[[Session], Any]) -> Any:
        """`run` for a short write transaction: on the loop when SQLite's writers' turn is free now."""
        if self._now is not None:
            try:
                with Session(self._now, expire_on_commit=False) as session:
                    return fn(session)
            except WriterBusy:
                pass  # nothing ran: its transaction did not begin
        return await self.run(fn)

    async def record(self, fn: Callable[[Session], Any]) -> Any:
        """`write` for a write that must not be lost: tried again while the database cannot be reached."""
        give_up = time.monotonic() + self._lease_grace_s
        while True:
            try:
                return await self.write(fn)
            except (OperationalError, InterfaceError):
                if time.monotonic() > give_up:
                    raise
            await asyncio.sleep(RECORD_RETRY_S)
