"""The limits of run starts: starts per minute and runs at once per organization, turns within a process,
and the Temporal priority a run starts at.

- `run_starts_per_minute`: counted from the runs' rows (every api process sees them); past it a start is
  `429 rate_limited` with Retry-After (when the oldest start of the minute leaves the window; a
  schedule's tick up to `TICK_RETRY_SPREAD_S` later, at random).
- `runs_per_org`: the organization's running runs, counted by Temporal's visibility (every api process sees
  the same number); past it a start is `429 concurrency_limited` (Retry-After `RUNS_RETRY_AFTER_S`).
- `STARTS_AT_ONCE_PER_ORG`: an organization's starts one api process works on at once (api.turns).
- `run_priority`: the priority key of a run from its organization's runs in flight (docs/routines.md,
  Fairness).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine, bindparam
from sqlmodel import col, select
from temporalio.client import Client
from temporalio.service import RPCError

from api.calls.errors import ConcurrencyLimited
from api.errors import RateLimited, ServiceUnavailable
from api.models import utcnow
from api.rawsql import Reads
from api.runs.reads import quoted
from api.runs.tables import RunRecord
from api.turns import Gates, org_turn
from engine.runs import SEARCH_ATTRIBUTE_ORG

RUNS_RETRY_AFTER_S = 5.0  # runs have no deadline to wait for: look again in a few seconds
TICK_RETRY_SPREAD_S = 30.0
"""A schedule's tick refused by its organization's run limits is told to come back at a random point up to
this much later than the limit frees: an organization's many ticks over its limits come back spread, not
all at the second its minute frees a start (each refused again, the whole way through Temporal, the worker
and the api; round 28)."""
RUNNING_COUNT_FRESH_S = 2.0
"""How long an api process goes by its count of an organization's running runs (a query of Temporal's
visibility, a good part of Temporal's work for a one-step run), adding the runs it started since. A count
that would refuse a start is taken again, unless Temporal's count itself refused one less than
`REFUSING_COUNT_KEPT_S` ago."""
REFUSING_COUNT_KEPT_S = 1.0
"""How long an api process refuses an organization's starts on a count of its running runs that refused
one, before it counts again: while an organization runs its most, its scheduled ticks and retries would
otherwise each cost a count, a grant written and removed and a check of the schedule (round 28)."""
RUNNING_COUNTS_KEPT = 1024
"""Organizations whose count a process keeps before it drops the stale ones."""

STARTS_AT_ONCE_PER_ORG = 1
"""Run starts of one organization an api process works on at once; its other starts wait their turn, so a
burst of one organization's starts does not take the process's CPU (checking, hashing and encoding large
inputs) and the database's one writer ahead of another organization's start. One start takes ~30 ms, so
an organization still starts ~30 runs a second per api process, above its starts per minute."""

_STARTS_SINCE = (
    select(RunRecord.created_at)
    .where(col(RunRecord.org_id) == bindparam("org_id"), col(RunRecord.created_at) > bindparam("since"))
    .order_by(col(RunRecord.created_at))
)  # built once, run on the driver (api.rawsql): every start reads it


def run_priority(running: int) -> int:
    """The Temporal priority key (1 first .. 5 last) of a run whose organization has `running` runs in
    flight: 1 with none, 2 with one, 3 with 2-3, 4 with 4-7, 5 with 8 or more. A worker busy with one
    organization's many runs takes the workflow tasks of an organization with few first (docs/routines.md,
    Fairness); the run's activities inherit the key.
    """
    return 1 + min(4, max(0, running).bit_length())


@dataclass
class _Running:
    """An organization's running runs as Temporal counted them, and those this process started since."""

    counted: int
    at: float  # time.monotonic() of the count
    since: int = 0

    def refusing(self, limit: int, now: float) -> bool:
        """Whether this count, as Temporal gave it, refused a start less than `REFUSING_COUNT_KEPT_S` ago."""
        return self.counted >= limit and now - self.at <= REFUSING_COUNT_KEPT_S


class RunLimits:
    """The run start limits of one api process (see the module docstring)."""

    def __init__(self, engine: Engine, *, starts_per_minute: int, runs_per_org: int) -> None:
        self._engine = engine
        self._starts_per_minute = starts_per_minute
        self._runs_per_org = runs_per_org
        self._turns: Gates = {}  # per org: its gate, starts in it
        self._starting: dict[str, int] = {}  # runs each organization is starting in this process now
        self._running: dict[str, _Running] = {}  # per org: its last count of running runs

    @asynccontextmanager
    async def turn(self, org_id: str) -> AsyncIterator[None]:
        """One of the organization's `STARTS_AT_ONCE_PER_ORG` turns to start a run in this process."""
        async with org_turn(self._turns, org_id, lambda: asyncio.Semaphore(STARTS_AT_ONCE_PER_ORG)):
            yield

    def check_starts(self, org_id: str, *, spread_s: float = 0.0) -> None:
        """Refuse a start past the organization's `run_starts_per_minute` (429 rate_limited, Retry-After
        when the oldest start of the minute leaves it, plus up to `spread_s` at random)."""
        limit = self._starts_per_minute
        since = utcnow() - timedelta(seconds=60)
        with Reads(self._engine) as reads:
            rows = reads.run(_STARTS_SINCE, {"org_id": org_id, "since": since}).rows
        started = [row.created_at for row in rows]
        if len(started) >= limit:
            frees_at = started[len(started) - limit] + timedelta(seconds=60)
            raise RateLimited(
                f"This organization started {len(started)} runs in the last 60 seconds, the most it may "
                f"({limit}).",
                retry_after=(frees_at - utcnow()).total_seconds() + random.uniform(0, spread_s),
                details={"limit": limit},
            )

    @contextmanager
    def starting(self, org_id: str) -> Iterator[int]:
        """Count a start of this process while it is made; yields the organization's other starts in this
        process not yet visible to Temporal (a burst of starts sees itself)."""
        others = self._starting.get(org_id, 0)
        self._starting[org_id] = others + 1
        try:
            yield others
        finally:
            self._starting[org_id] -= 1
            if not self._starting[org_id]:
                del self._starting[org_id]

    def started(self, org_id: str) -> None:
        """Count a run this process started into its organization's last count."""
        if (seen := self._running.get(org_id)) is not None:
            seen.since += 1

    def check_known_running(self, org_id: str, *, spread_s: float = 0.0) -> None:
        """Refuse at once a start of an organization whose count of running runs, as Temporal gave it,
        refused one less than `REFUSING_COUNT_KEPT_S` ago (nothing asked of the database or Temporal).

        Raises:
            ConcurrencyLimited: as `check_running`.
        """
        seen = self._running.get(org_id)
        if seen is not None and seen.refusing(self._runs_per_org, time.monotonic()):
            self._refuse_past(seen.counted + seen.since, spread_s)

    def _refuse_past(self, running: int, spread_s: float) -> None:
        if running >= self._runs_per_org:
            raise ConcurrencyLimited(
                f"this organization already has {running} runs running, the most it may at once "
                f"({self._runs_per_org}); start this one when one of them has ended",
                retry_after=RUNS_RETRY_AFTER_S + random.uniform(0, spread_s),
                details={"limit": self._runs_per_org},
            )

    async def check_running(self, client: Client, org_id: str, *, spread_s: float = 0.0) -> int:
        """Refuse a start past the organization's runs at once (`runs_per_org`), with Retry-After (plus up
        to `spread_s` at random).

        Counted by Temporal's visibility, so every api process sees the same number; a count is reused
        for `RUNNING_COUNT_FRESH_S` with the runs this process started since, unless it would refuse: then
        only for `REFUSING_COUNT_KEPT_S`, and only when Temporal's count itself refused. Starts that another
        api process makes meanwhile are not seen: they may overshoot the limit by a few.

        Returns:
            The organization's runs running now.
        """
        limit = self._runs_per_org
        now = time.monotonic()
        seen = self._running.get(org_id)
        if (
            seen is None
            or now - seen.at > RUNNING_COUNT_FRESH_S
            or (seen.counted + seen.since >= limit and not seen.refusing(limit, now))
        ):
            query = f"{SEARCH_ATTRIBUTE_ORG} = {quoted(org_id)} AND ExecutionStatus = 'Running'"
            try:
                seen = _Running((await client.count_workflows(query)).count, now)
            except RPCError as exc:
                raise ServiceUnavailable(
                    f"Temporal did not count the running runs: {exc.message}", retry_after_s=5
                ) from exc
            if len(self._running) >= RUNNING_COUNTS_KEPT:
                self._running = {
                    o: r for o, r in self._running.items() if now - r.at <= RUNNING_COUNT_FRESH_S
                }
            self._running[org_id] = seen
        running = seen.counted + seen.since
        self._refuse_past(running, spread_s)
        return running
