"""The call service: one action call from request to answer, for every surface (HTTP, MCP, routines)
and every action kind.

    request -> idempotency claim -> resolve the ref (api.registry.catalog, the one rule) -> check the input
            -> price and time it -> the executor prepares (vm: nodes; http: connections, request)
            -> admit (limits, lease, the key's claim linked to the call) -> the executor runs it
            -> record the charge, the units and the stored answer in one transaction
            -> answer `{call_id, ref, tier, output, cost, timings}`

A routine step's call waits in the api for a slot (api.calls.admission); calls over HTTP and MCP are
answered at once.

A call that was admitted is finished and recorded even if the client stopped waiting: the work
runs in its own task, shielded from the request's cancellation. To stop it, cancel it
(`api.calls.cancel`): its executor stops it and the call ends with that outcome. A database that
cannot be reached when the outcome is to be recorded (or the key's claim released) is waited for, up
to `lease_grace_s` (api.calls.sessions).

The request and its rules are `api.calls.request`'s, the answer's shape `api.calls.answers`'; each
executor (api.calls.executor) gets what it needs at construction (the sessions, settings, clock, unit
prices and its own clients), never the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlmodel import Session

from api import metrics
from api.accounts.organizations import new_id
from api.calls import cancel, idempotency, limits, metering, run_cost
from api.calls.admission import Admissions
from api.calls.answers import Answer, answer_of, failed_outcome, outcome_of
from api.calls.costs import VM_MEMORY_MB, VM_VCPU, action_price_microusd, call_ceiling
from api.calls.errors import (
    CallInvalid,
    IdempotencyInProgress,
    PackUnavailable,
    RefNotFound,
    RefNotOfStep,
)
from api.calls.executor import HTTP_LANE, Execution, Executor, Prepared
from api.calls.http_action import HttpExecutor
from api.calls.inputs import check_input
from api.calls.js_action import JsExecutor
from api.calls.request import CallBody, Caller, parse_ref, parse_request
from api.calls.sessions import CallSessions
from api.calls.settings import CallSettings
from api.calls.tables import ActionCall
from api.calls.vm import VmExecutor
from api.db import run_reading
from api.errors import CallError
from api.models import utcnow
from api.rawsql import Reads, Transaction
from api.registry import catalog
from packs.resolve import Resolved, ResolveError

log = logging.getLogger(__name__)

MAINTENANCE_S = 600.0
TWIN_FIRST_PAUSE_S = 0.05
TWIN_LAST_PAUSE_S = 1.0
"""A request waiting on its running Idempotency-Key twin reads the key again after 50 ms, doubling up to
1 s; a twin running in this process wakes it at once when it ends."""


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class CallService:
    """Runs action calls against the nodes, under the limits, metered, idempotent."""

    def __init__(
        self,
        *,
        engine: Engine,
        settings: CallSettings,
        egress_url: str | None = None,
        egress_token: str | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        """Keep the engine and settings, and make an executor per action kind with what it needs."""
        self.engine = engine
        self.db = CallSessions(engine, lease_grace_s=settings.lease_grace_s)
        self.settings = settings
        self.clock = clock
        self._next_maintenance = 0.0
        self._admissions = Admissions(self.db)
        self._twins: dict[tuple[str, str], asyncio.Event] = {}  # (org, key) of this process's running calls
        self._versions: catalog.KnownVersions = {}  # pack versions read (immutable: never invalidated)
        prices = self._prices = settings.unit_prices()
        self._vm = VmExecutor(db=self.db, settings=settings, prices=prices, clock=clock)
        self._http = HttpExecutor(db=self.db, prices=prices, egress_url=egress_url, egress_token=egress_token)
        self._js = JsExecutor(
            db=self.db, settings=settings, prices=prices, clock=clock, egress_token=egress_token
        )
        self.executors: dict[str, Executor] = {"vm": self._vm, "http": self._http, "js": self._js}

    async def aclose(self) -> None:
        """Close the executors' HTTP clients (to the nodes, to the egress proxy)."""
        await self._vm.aclose()
        await self._http.aclose()
        await self._js.aclose()

    # --- the entry point ------------------------------------------------------------------------

    async def call(self, caller: Caller, payload: Any, *, idempotency_key: str | None = None) -> Answer:
        """Run one call and return its answer (errors are answers too, never raised)."""
        started = time.perf_counter()
        try:
            request = parse_request(payload)
            if caller.run_ref is not None and request.ref != caller.run_ref:
                raise RefNotOfStep(
                    f"A routine step calls the ref its run pinned ({caller.run_ref}), "
                    f"not {request.ref[:200]}.",
                    reason="ref_not_of_step",
                )
            if idempotency_key is not None:
                idempotency.check_key(idempotency_key)
                replay = await self._claim(
                    caller, idempotency_key, idempotency.request_hash(request.canonical())
                )
                if replay is not None:
                    return metrics.replayed(caller.surface, replay)
        except CallError as exc:
            return metrics.answered(caller.surface, Answer.of_error(exc), started)
        task = asyncio.ensure_future(self._execute(caller, request, idempotency_key, started))
        if idempotency_key is not None:  # its answer is stored (or its claim released) when the task ends
            twin, ended = (caller.org_id, idempotency_key), asyncio.Event()
            self._twins[twin] = ended
            task.add_done_callback(lambda _: self._twin_ended(twin, ended))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:  # the client stopped waiting: the call goes on, its end is logged
            task.add_done_callback(_orphan_ended)
            raise

    async def cancel(self, caller: Caller, *, key: str | None = None, call_id: str | None = None) -> Answer:
        """Cancel a running call of the caller's organization, by its Idempotency-Key or its id."""
        return await cancel.cancel_call(self.db, self.executor, caller, key=key, call_id=call_id)

    async def _claim(self, caller: Caller, key: str, digest: str) -> Answer | None:
        hold_s = self.settings.max_call_timeout_ms / 1000 + self.settings.call_overhead_s
        give_up = time.monotonic() + hold_s + self.settings.lease_grace_s
        pause_s = TWIN_FIRST_PAUSE_S
        while True:
            # looked up before the read: a twin of this process that ends meanwhile has set it already
            twin = self._twins.get((caller.org_id, key))
            claim: idempotency.Claim = await self.db.write(
                lambda s: idempotency.try_claim(
                    s,
                    org_id=caller.org_id,
                    key=key,
                    digest=digest,
                    now=self.clock(),
                    hold_s=hold_s,
                    ttl_s=self.settings.idempotency_ttl_s,
                )
            )
            if claim.owner:
                return None
            if claim.replay is not None:
                status, body = claim.replay
                headers = {"Idempotent-Replayed": "true"}
                return Answer(status, body, headers)
            if time.monotonic() > give_up:
                wait = (claim.wait_until - self.clock()).total_seconds() if claim.wait_until else 1.0
                raise IdempotencyInProgress(
                    f"a request with Idempotency-Key {key!r} is still running", retry_after=wait
                )
            with contextlib.suppress(TimeoutError):  # a twin in another process: only the pause ends it
                await asyncio.wait_for((twin or asyncio.Event()).wait(), timeout=pause_s)
            pause_s = min(2 * pause_s, TWIN_LAST_PAUSE_S)

    async def _execute(self, caller: Caller, request: CallBody, key: str | None, started: float) -> Answer:
        call: ActionCall | None = None
        outcome: metering.Outcome | None = None
        try:
            answer, call, outcome = await self._run(caller, request, key, started)
        except CallError as exc:
            answer = Answer.of_error(exc)
        except BaseException:
            await self.db.record(lambda s: self._finish(s, caller, key, None, call, failed_outcome()))
            raise
        await self.db.record(lambda s: self._finish(s, caller, key, answer, call, outcome))
        if call is not None:
            self._admissions.wake()
        await self._maintain()
        return metrics.answered(caller.surface, answer, started)

    def _twin_ended(self, twin: tuple[str, str], ended: asyncio.Event) -> None:
        """Wake the requests of this process waiting on the call of an Idempotency-Key, which has ended."""
        if self._twins.get(twin) is ended:
            del self._twins[twin]
        ended.set()

    async def _maintain(self) -> None:
        """Now and then: drop stored answers past their 24 h and mark the rows of lost calls."""
        if time.monotonic() < self._next_maintenance:
            return
        self._next_maintenance = time.monotonic() + MAINTENANCE_S

        def sweep(session: Session) -> None:
            now = self.clock()
            limits.mark_lost(session, now=now)
            idempotency.purge(session, now=now)

        try:
            await self.db.run(sweep)
        except (OperationalError, InterfaceError) as exc:  # the call's answer stands; the next call sweeps
            log.warning("the calls' sweep could not reach the database: %s", type(exc).__name__)
            self._next_maintenance = 0.0

    def _finish(
        self,
        session: Transaction,
        caller: Caller,
        key: str | None,
        answer: Answer | None,
        call: ActionCall | None,
        outcome: metering.Outcome | None,
    ) -> None:
        now = self.clock()
        if call is not None and outcome is not None:
            metering.record(session, call=call, outcome=outcome, now=now)
        if key is not None:
            if answer is None or not idempotency.is_stored(answer.status, answer.body):
                idempotency.release(session, org_id=caller.org_id, key=key)
            else:
                idempotency.store(
                    session,
                    org_id=caller.org_id,
                    key=key,
                    status=answer.status,
                    body=answer.body,
                    call_id=call.id if call else None,
                )
        session.commit()

    # --- one call -------------------------------------------------------------------------------

    async def _prepare(self, caller: Caller, request: CallBody) -> Prepared:
        """Resolve the ref, check the input, price and time the call, then its executor's preparation: the
        database part on one driver connection where `run_reading` puts reads, the rest (if any) on the
        loop."""
        ref = parse_ref(request.ref)

        def read() -> Prepared:
            with Reads(self.engine) as reads:
                return find(reads)

        def find(reads: Reads) -> Prepared:
            try:
                resolved, raw = catalog.resolve_known(reads, ref=ref, known=self._versions)
            except ResolveError as exc:
                raise RefNotFound(f"{ref}: {exc}", details={"ref": str(ref)}) from None
            checked = check_input(resolved.action.input_schema, request.input)
            price = action_price_microusd(raw, catalog.find_action(raw, ref.action) or {})
            prepared = Prepared(
                resolved=resolved,
                checked=checked,
                price=price,
                timeout_ms=self._timeout_ms(resolved, request, price, step=caller.run_key is not None),
            )
            return self.executor(resolved.kind).read(reads, prepared, org_id=caller.org_id)

        prepared = await run_reading(self.engine, read)
        return await self.executor(prepared.resolved.kind).prepare(prepared, org_id=caller.org_id)

    def executor(self, kind: str) -> Executor:
        """The executor of an `impl.kind` (publishing refuses a pack whose actions none can run)."""
        found = self.executors.get(kind)
        if found is None:
            raise PackUnavailable(f"this api runs no {kind!r} actions", retry_after=MAINTENANCE_S)
        return found

    async def _run(
        self, caller: Caller, request: CallBody, key: str | None, started: float
    ) -> tuple[Answer, ActionCall | None, metering.Outcome | None]:
        prepared = await self._prepare(caller, request)
        resolved = prepared.resolved
        executor = self.executor(resolved.kind)
        validate_ms = _ms(time.perf_counter() - started)
        adm = limits.Admission(
            call_id=new_id("tcall"),
            org_id=caller.org_id,
            key_id=caller.key_id,
            spend_cap_microusd=caller.spend_cap_microusd,
            surface=caller.surface,
            pack=resolved.pack,
            version=resolved.version,
            action=resolved.ref.action,
            price=prepared.price,
            timeout_ms=prepared.timeout_ms,
            lane=None if executor.tier in ("vm", "js") else HTTP_LANE,
            run_id=caller.run_id,
            ceiling=None if caller.run_id is None else self._ceiling(prepared),
        )

        def link(session: Transaction) -> None:
            if key is not None:  # a cancel by key finds the running call
                idempotency.link_call(session, org_id=caller.org_id, key=key, call_id=adm.call_id)
            if caller.run_id is not None and caller.run_max_cost is not None:  # its run's max holds
                run_cost.check(
                    session,
                    run_id=caller.run_id,
                    step=caller.run_step or "",
                    most=caller.run_max_cost,
                    ceiling=adm.ceiling or 0,
                )

        def admit(session: Transaction) -> ActionCall:
            return limits.admit(
                session, adm=adm, nodes=prepared.nodes, settings=self.settings, clock=self.clock, also=link
            )

        def refusal(session: Session) -> None:
            limits.refusal(session, adm=adm, nodes=prepared.nodes, settings=self.settings, now=self.clock())

        while True:
            wait_s = self.settings.routine_admission_wait_s if caller.surface == "routine" else 0.0
            call = await self._admissions.admit(caller.org_id, admit, refusal, wait_s=wait_s)
            execution = await self._execute_on(caller, executor, call, prepared)
            others = [n for n in prepared.nodes if n.node_id != call.node_id]
            if not execution.elsewhere or not others:
                return (
                    answer_of(executor.tier, call, resolved, execution, validate_ms),
                    call,
                    outcome_of(execution),
                )
            # nothing the api believes ran on that node (now out of the live ones): this row ends as not
            # answered, nothing billed, and the call is placed again on another node, in the same request
            not_answered = functools.partial(
                self._finish, caller=caller, key=None, answer=None, call=call, outcome=outcome_of(execution)
            )
            await self.db.record(not_answered)
            prepared = replace(prepared, nodes=others)
            adm = replace(adm, call_id=new_id("tcall"))

    async def _execute_on(
        self, caller: Caller, executor: Executor, call: ActionCall, prepared: Prepared
    ) -> Execution:
        """Run an admitted call; its row ends as failed if anything stops it."""
        try:
            return await executor.execute(call, prepared)
        except BaseException:
            await self.db.record(lambda s: self._finish(s, caller, None, None, call, failed_outcome()))
            raise

    def _ceiling(self, prepared: Prepared) -> int:
        """The most this call can cost (api.calls.costs.call_ceiling), held against its run's max."""
        resolved = prepared.resolved
        size = resolved.manifest.tool.size if resolved.manifest.tool is not None else None
        return call_ceiling(
            self._prices,
            kind=resolved.kind,
            price=prepared.price,
            timeout_ms=prepared.timeout_ms,
            vcpu=size.vcpu if size else VM_VCPU,
            memory_mb=size.memory_mb if size else VM_MEMORY_MB,
        ).total

    def _timeout_ms(self, resolved: Resolved, request: CallBody, price: int, *, step: bool) -> int:
        """The call's time: the least of the request's, the action's own and the most a call may take. A
        priced action runs at least to its own: a lower `timeout_ms` is refused, but a routine step's call
        (`step`) runs to the action's own timeout (the step's `timeout` still bounds the step)."""
        own = resolved.action.execution.timeout_ms or self.settings.default_action_timeout_ms
        if request.timeout_ms is not None and price > 0 and request.timeout_ms < own and step:
            return min(own, self.settings.max_call_timeout_ms)
        if request.timeout_ms is not None and price > 0 and request.timeout_ms < own:
            raise CallInvalid(
                f"timeout_ms {request.timeout_ms} is below this priced action's own timeout of {own} ms; "
                "a priced action runs at least to its own timeout",
                details={"field": "timeout_ms"},
            )
        return min(t for t in (request.timeout_ms, own, self.settings.max_call_timeout_ms) if t is not None)


def _orphan_ended(task: asyncio.Future[Answer]) -> None:
    """A call whose request stopped waiting has ended: an error of its own is logged here (nobody else
    retrieves it), a database out of reach in one line."""
    if task.cancelled():
        return
    exc = task.exception()
    if isinstance(exc, (OperationalError, InterfaceError)):
        log.warning(
            "a call could not record its outcome: the database could not be reached (%s)", type(exc).__name__
        )
    elif exc is not None:
        log.error("a call failed after its request stopped waiting", exc_info=exc)
