"""The call service: one action call from request to answer, for every surface (HTTP, MCP, routines).

    request -> idempotency claim -> resolve the ref -> check the input -> admit (limits, node, lease)
            -> the node runs it -> check the output -> cost -> record the charge, the units and the
            stored answer in one transaction -> answer

A call that reached a node is finished and recorded even if the client stopped waiting: the work
runs in its own task, shielded from the request's cancellation. To stop it, cancel it
(`api.calls.cancel`): its node kills the VM and the call ends with that outcome.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from api.accounts import new_id
from api.calls import cancel, idempotency, limits, metering, placement
from api.calls.costs import Cost, action_price_microusd, call_cost
from api.calls.errors import (
    NODE_ERRORS,
    CallError,
    CallInvalid,
    IdempotencyInProgress,
    ToolTimedOut,
    ToolUnavailable,
)
from api.calls.inputs import CheckedInput, check_input
from api.calls.nodeclient import NodeAnswer, send_call
from api.calls.outputs import check_output
from api.calls.settings import CallSettings
from api.calls.tables import RUNNING, ToolCall
from api.models import Node, utcnow

PHASES = ("start", "copy", "unpack", "run", "collect", "delete")
MAINTENANCE_S = 600.0
_NODE_FIELDS_SKIPPED = ("code", "reason", "message", "retry_after")


@dataclass(frozen=True)
class Caller:
    """Who calls: the key the call is metered under, and the surface it came through."""

    org_id: str
    key_id: str
    spend_cap_microusd: int | None = None
    surface: str = "http"


@dataclass
class Answer:
    """The answer of a call: HTTP status, JSON body and headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallRequest:
    """A parsed call request."""

    ref: str
    input: dict[str, Any]
    timeout_ms: int | None

    def canonical(self) -> dict[str, Any]:
        """What identifies the request for Idempotency-Key."""
        return {"ref": self.ref, "input": self.input, "timeout_ms": self.timeout_ms}


def parse_request(payload: Any) -> CallRequest:
    """Check the request body `{"ref", "input", "timeout_ms"?}`.

    Raises:
        CallInvalid: naming the field at fault.
    """
    if not isinstance(payload, dict):
        raise CallInvalid("the request body must be a JSON object", details={"field": "body"})
    extra = sorted(set(payload) - {"ref", "input", "timeout_ms"})
    if extra:
        raise CallInvalid(f"the field {extra[0]} is not accepted here", details={"field": extra[0]})
    ref = payload.get("ref")
    if not isinstance(ref, str) or not ref:
        raise CallInvalid(
            "the field ref is required: an action ref such as com.example.tools/echo/echo@1",
            details={"field": "ref"},
        )
    value = payload.get("input", {})
    if not isinstance(value, dict):
        raise CallInvalid(
            f"input must be a JSON object, not {type(value).__name__}", details={"field": "input"}
        )
    timeout_ms = payload.get("timeout_ms")
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1
    ):
        raise CallInvalid(
            f"timeout_ms must be a whole number of milliseconds of at least 1, not {timeout_ms!r}",
            details={"field": "timeout_ms"},
        )
    return CallRequest(ref=ref, input=value, timeout_ms=timeout_ms)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class CallService:
    """Runs action calls against the nodes, under the limits, metered, idempotent."""

    def __init__(
        self,
        *,
        engine: Engine,
        settings: CallSettings,
        node_token: str | None,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        """Keep the engine, settings and node token; the HTTP client is made on first use."""
        self.engine = engine
        self.settings = settings
        self.node_token = node_token
        self.clock = clock
        self.prices = settings.unit_prices()
        self._client: httpx.AsyncClient | None = None
        self._next_maintenance = 0.0

    async def aclose(self) -> None:
        """Close the HTTP client to the nodes."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50)
            )
        return self._client

    async def _db(self, fn: Callable[[Session], Any]) -> Any:
        def run() -> Any:
            with Session(self.engine, expire_on_commit=False) as session:
                return fn(session)

        return await anyio.to_thread.run_sync(run)

    # --- the entry point ------------------------------------------------------------------------

    async def call(self, caller: Caller, payload: Any, *, idempotency_key: str | None = None) -> Answer:
        """Run one call and return its answer (errors are answers too, never raised)."""
        started = time.perf_counter()
        try:
            request = parse_request(payload)
            if idempotency_key is not None:
                idempotency.check_key(idempotency_key)
                replay = await self._claim(
                    caller, idempotency_key, idempotency.request_hash(request.canonical())
                )
                if replay is not None:
                    return replay
        except CallError as exc:
            return Answer(exc.status, exc.body(), exc.headers)
        task = asyncio.ensure_future(self._execute(caller, request, idempotency_key, started))
        return await asyncio.shield(task)

    async def cancel(self, caller: Caller, *, key: str | None = None, call_id: str | None = None) -> Answer:
        """Cancel a running call of the caller's organization, by its Idempotency-Key or its id."""
        return await cancel.cancel_call(self, caller, key=key, call_id=call_id)

    async def _claim(self, caller: Caller, key: str, digest: str) -> Answer | None:
        hold_s = self.settings.max_call_timeout_ms / 1000 + self.settings.call_overhead_s
        give_up = time.monotonic() + hold_s + self.settings.lease_grace_s
        while True:
            claim: idempotency.Claim = await self._db(
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
            await asyncio.sleep(0.05)

    async def _execute(self, caller: Caller, request: CallRequest, key: str | None, started: float) -> Answer:
        call: ToolCall | None = None
        outcome: metering.Outcome | None = None
        try:
            answer, call, outcome = await self._run(caller, request, key, started)
        except CallError as exc:
            answer = Answer(exc.status, exc.body(), exc.headers)
        except BaseException:
            await self._db(lambda s: self._finish(s, caller, key, None, call, _failed_outcome()))
            raise
        await self._db(lambda s: self._finish(s, caller, key, answer, call, outcome))
        await self._maintain()
        return answer

    async def _maintain(self) -> None:
        """Now and then: drop stored answers past their 24 h and mark the rows of lost calls."""
        if time.monotonic() < self._next_maintenance:
            return
        self._next_maintenance = time.monotonic() + MAINTENANCE_S

        def sweep(session: Session) -> None:
            now = self.clock()
            limits.mark_lost(session, now=now)
            idempotency.purge(session, now=now)

        await self._db(sweep)

    def _finish(
        self,
        session: Session,
        caller: Caller,
        key: str | None,
        answer: Answer | None,
        call: ToolCall | None,
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

    async def _run(
        self, caller: Caller, request: CallRequest, key: str | None, started: float
    ) -> tuple[Answer, ToolCall | None, metering.Outcome | None]:
        ref = placement.parse_ref(request.ref)
        now = self.clock()

        def resolve(session: Session) -> placement.Target:
            live = placement.live_nodes(session, now=now, max_age_s=self.settings.node_live_s)
            return placement.resolve(
                session, ref=ref, live=live, now=now, heartbeat_s=self.settings.node_heartbeat_s
            )

        target: placement.Target = await self._db(resolve)
        checked = check_input(target.action.get("inputSchema") or {"type": "object"}, request.input)
        price = action_price_microusd(target.manifest, target.action)
        timeout_ms = self._timeout_ms(target, request, price)
        validate_s = time.perf_counter() - started
        adm = limits.Admission(
            call_id=new_id("tcall"),
            org_id=caller.org_id,
            key_id=caller.key_id,
            spend_cap_microusd=caller.spend_cap_microusd,
            surface=caller.surface,
            pack=target.pack,
            version=target.version,
            action=ref.action,
            price=price,
            timeout_ms=timeout_ms,
        )

        def admit(session: Session) -> ToolCall:
            admitted = limits.admit(
                session, adm=adm, nodes=target.nodes, settings=self.settings, now=self.clock()
            )
            if key is not None:  # a cancel by key finds the running call
                idempotency.link_call(session, org_id=caller.org_id, key=key, call_id=admitted.id)
                session.commit()
            return admitted

        call: ToolCall = await self._db(admit)
        node = next(n for n in target.nodes if n.node_id == call.node_id)
        try:
            return await self._on_node(call, node, target, checked, price, validate_s)
        except CallError as exc:
            return Answer(exc.status, exc.body(), exc.headers), call, _failed_outcome(exc)
        except BaseException:
            await self._db(lambda s: self._finish(s, caller, None, None, call, _failed_outcome()))
            raise

    def _timeout_ms(self, target: placement.Target, request: CallRequest, price: int) -> int:
        execution = target.action.get("execution") or {}
        own = int(execution.get("timeoutMs") or self.settings.default_action_timeout_ms)
        if request.timeout_ms is not None and price > 0 and request.timeout_ms < own:
            raise CallInvalid(
                f"timeout_ms {request.timeout_ms} is below this priced action's own timeout of {own} ms; "
                "a priced action runs at least to its own timeout",
                details={"field": "timeout_ms"},
            )
        return min(t for t in (request.timeout_ms, own, self.settings.max_call_timeout_ms) if t is not None)

    async def _on_node(
        self,
        call: ToolCall,
        node: Node,
        target: placement.Target,
        checked: CheckedInput,
        price: int,
        validate_s: float,
    ) -> tuple[Answer, ToolCall, metering.Outcome]:
        body = {
            "call_id": call.id,
            "pack": target.pack,
            "version": target.version,
            "action": target.ref.action,
            "cmd": (target.action.get("impl") or {}).get("cmd", []),
            "timeout_ms": call.timeout_ms,
            "max_output_bytes": self.settings.max_output_bytes,
            "input": checked.wire(),
            "file_fields": checked.file_fields,
        }
        reply = await send_call(
            self._http(),
            url=node.url,
            token=self.node_token,
            body=body,
            timeout_s=call.timeout_ms / 1000 + self.settings.call_overhead_s,
        )
        result = reply.result
        usage: dict[str, Any] = result["usage"] if isinstance(result.get("usage"), dict) else {}
        timings: dict[str, Any] = result["timings"] if isinstance(result.get("timings"), dict) else {}
        ran = bool(result.get("ran")) and reply.status == 200
        vcpu_ms, gib_ms = (_int(usage.get("vcpu_ms")), _int(usage.get("gib_ms"))) if ran else (0, 0)
        error: CallError | None = None
        output: Any = None
        if reply.status == 200 and result.get("ok") is True:
            try:
                output = check_output(
                    target.action.get("outputSchema") or {"type": "object"}, result.get("output")
                )
            except CallError as exc:
                error = exc
        else:
            error = await self._node_error(reply, call)
        cost_started = time.perf_counter()
        # a cancelled call is never charged the price, even if its tool answered just before the kill
        answered = error is None and result.get("cancelled") is not True
        cost = call_cost(
            self.prices, ran=ran, answered=answered, vcpu_ms=vcpu_ms, gib_ms=gib_ms, price=price
        )
        phases = {"validate": _ms(validate_s)}
        phases.update({p: round(float(timings.get(p) or 0.0), 3) for p in PHASES})
        phases["cost"] = _ms(time.perf_counter() - cost_started)
        outcome = metering.Outcome(
            status=200 if error is None else error.status,
            code=None if error is None else error.code,
            reason=None if error is None else error.reason,
            ran=ran,
            vcpu_ms=vcpu_ms,
            gib_ms=gib_ms,
            cost=cost,
        )
        if error is not None:
            body_ = error.body()
            body_["error"].update(
                {"call_id": call.id, "ref": target.resolved, "cost": cost.as_dict(), "timings": phases}
            )
            return Answer(error.status, body_, error.headers), call, outcome
        answer = {
            "call_id": call.id,
            "ref": target.resolved,
            "tier": "vm",
            "output": output,
            "cost": cost.as_dict(),
            "timings": phases,
        }
        return Answer(200, answer), call, outcome

    async def _node_error(self, reply: NodeAnswer, call: ToolCall) -> CallError:
        result = reply.result
        err: dict[str, Any] = result["error"] if isinstance(result.get("error"), dict) else {}
        if reply.status == 0:
            if reply.timed_out:
                return ToolTimedOut(f"{reply.failure}: the call did not finish within {call.timeout_ms} ms")
            return ToolUnavailable(
                f"{reply.failure}; nothing was billed",
                reason="exec",
                retry_after=await self._node_retry_after(call),
            )
        if reply.status != 200:
            code = err.get("code") or "tool_unavailable"
            reason = err.get("reason") or ("node_busy" if reply.status == 503 else "exec")
            if code != "tool_unavailable" or reply.status not in (503, 429):
                return ToolUnavailable(
                    f"the node refused the run (HTTP {reply.status}); nothing was billed",
                    reason="exec",
                    retry_after=await self._node_retry_after(call),
                )
            return ToolUnavailable(
                str(err.get("message") or "the node is busy; nothing was billed"),
                reason=str(reason),
                retry_after=await self._node_retry_after(call),
            )
        cls = NODE_ERRORS.get(str(err.get("code")), CallError)
        if cls is CallError:
            return ToolUnavailable(
                "the node answered a result this api does not understand; nothing was billed",
                reason="exec",
                retry_after=await self._node_retry_after(call),
            )
        details = {k: v for k, v in err.items() if k not in _NODE_FIELDS_SKIPPED}
        retry_after: float | None = None
        if cls.status == 503:
            retry_after = _float(err.get("retry_after")) or await self._node_retry_after(call)
        return cls(
            str(err.get("message") or cls.code.replace("_", " ")),
            reason=err.get("reason"),
            retry_after=retry_after,
            details=details,
        )

    async def _node_retry_after(self, call: ToolCall) -> float:
        """When the node may have a slot again: the soonest deadline of its other running calls, else its
        next heartbeat."""
        now = self.clock()

        def soonest(session: Session) -> float:
            deadlines = session.exec(
                select(ToolCall.deadline_at).where(
                    col(ToolCall.node_id) == call.node_id,
                    col(ToolCall.state) == RUNNING,
                    col(ToolCall.id) != call.id,
                    col(ToolCall.lease_expires_at) > now,
                )
            ).all()
            if deadlines:
                return (min(deadlines) - now).total_seconds()
            return self.settings.node_heartbeat_s

        value: float = await self._db(soonest)
        return value


def _failed_outcome(exc: CallError | None = None) -> metering.Outcome:
    return metering.Outcome(
        status=500 if exc is None else exc.status,
        code="internal" if exc is None else exc.code,
        reason=None if exc is None else exc.reason,
        ran=False,
        vcpu_ms=0,
        gib_ms=0,
        cost=Cost(),
    )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def _float(value: Any) -> float | None:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
    )
