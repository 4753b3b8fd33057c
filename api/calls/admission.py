"""A call's admission, and the routine step calls of one api process that wait for a slot.

A routine step's call (surface `routine`) that finds no free slot (429 concurrency_limited, 503
node_busy) waits in the api for one, up to `routine_admission_wait_s`, before that answer: the worker
would only wait out a Retry-After of whole seconds, where a slot of a short call frees in
milliseconds. So does one refused for its organization's starts (429 rate_limited: the minute's
120, or the spread of a routine's calls past 20 of them, `limits`) when its Retry-After is within
that wait: otherwise each of a busy organization's held-back steps would come back through Temporal
about once a second, a retry's whole way (a timer, a task, the worker, the api) for each refusal.
Admission stays one transaction each time; a call that ends in this process wakes the oldest waiters
at once (`Admissions.wake`), and an organization's waiters together also try again on
their own about every `ADMISSION_POLL_S` (a slot freed by another api process). A waiter's try first
reads whether it would be refused (`limits.refusal`) and takes the database's writers' turn only when it
would not. Before both, 80 calls of one organization waiting for its 4 slots took that turn ~160 times a
second, and every other organization's run starts and calls waited behind them. Calls over HTTP and MCP
are answered at once.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Callable

from sqlmodel import Session

from api.calls.errors import ConcurrencyLimited, ToolUnavailable
from api.calls.sessions import CallSessions
from api.calls.tables import ActionCall
from api.errors import RateLimited
from api.rawsql import Transaction

ADMISSION_POLL_S = 0.5
"""About how often an organization's waiting routine calls try admission again, together, without a
wake-up (a slot freed by another api process)."""
WAKE_PER_FINISH = 2
"""Waiting calls woken when a call of this process ends (its slot may suit only one of them)."""


def _waitable(refused: ConcurrencyLimited | ToolUnavailable | RateLimited, left: float) -> bool:
    """Whether a refusal may be waited out in the api: a full organization or node (a slot frees in
    milliseconds), or the organization's starts in the last minute when the oldest leaves the window
    within the wait (not an upstream's 429: that is the worker's to wait out)."""
    if isinstance(refused, ToolUnavailable):
        return refused.reason == "node_busy"
    if isinstance(refused, RateLimited):
        return refused.reason is None and refused.retry_after is not None and refused.retry_after <= left
    return True


class Admissions:
    """Admits calls; keeps the routine calls of this process that wait for a slot, oldest first."""

    def __init__(self, db: CallSessions) -> None:
        self._db = db
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._waiting_of: collections.Counter[str] = collections.Counter()  # waiting calls per organization

    async def admit(
        self,
        org: str,
        admit: Callable[[Transaction], ActionCall],
        refusal: Callable[[Session], None],
        *,
        wait_s: float,
    ) -> ActionCall:
        """Admit the call, waiting for a slot up to `wait_s` (0: not at all), each try after the first
        reading `refusal` before it writes.

        Raises:
            ConcurrencyLimited, ToolUnavailable, RateLimited: no slot or start came in time; any other
                refusal at once.
        """
        give_up = time.monotonic() + wait_s
        waited = False
        try:
            while True:
                try:
                    if waited:
                        await self._db.read(refusal)
                    call: ActionCall = await self._db.write(admit)
                    return call
                except (ConcurrencyLimited, ToolUnavailable, RateLimited) as exc:
                    left = give_up - time.monotonic()
                    if left <= 0 or not _waitable(exc, left):
                        raise
                if not waited:
                    waited = True
                    self._waiting_of[org] += 1
                await self._wait_for_slot(org, left)
        finally:
            if waited:
                self._waiting_of[org] -= 1
                if self._waiting_of[org] <= 0:
                    del self._waiting_of[org]

    def wake(self, count: int = WAKE_PER_FINISH) -> None:
        """Wake the `count` oldest calls waiting for a slot (a call of this process ended)."""
        while count > 0 and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    async def _wait_for_slot(self, org: str, left: float) -> None:
        """Until a call of this process ends and wakes this one, or about `ADMISSION_POLL_S` times the
        organization's waiting calls: together they try about as often as one (spread, not in step)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            poll_s = ADMISSION_POLL_S * self._waiting_of[org] * (0.5 + random.random())
            await asyncio.wait_for(asyncio.shield(waiter), timeout=min(left, poll_s))
        except TimeoutError:
            pass
        finally:
            if not waiter.done():
                waiter.cancel()  # stays in the queue until a wake-up pops it
