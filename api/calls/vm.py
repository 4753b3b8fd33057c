"""The `vm` executor: a hosted tool's call placed on the least loaded live node that has the version.

`prepare` finds the live nodes that have installed the exact version resolved. A version the registry
has but no live node has installed (not synced yet, or its verification failed there) is `503
pack_unavailable`, with `Retry-After` set to when the nodes next report: a node installs at its next
registry sync and says so in the heartbeat after it, so two heartbeat periods after the oldest live
node was last heard from (two periods when no node is live). Admission then takes a slot on the least
loaded of them; `execute` sends the call to that node, signed with its call key (api.calls.nodeclient),
and reads its answer (json-stdio outcome, usage, phases `start` `copy` `unpack` `run` `collect`
`delete`). A node whose credential is revoked is not live (api.nodes.live_nodes). A node that could not be
reached gets no calls until it heartbeats again, one that answered without its proof none for
`node_bad_s` (api.nodes.mark_bad); either way nothing ran that the api believes, and the service places
the call again on another node (`Execution.elsewhere`). Each call names its
organization's `tenant` (a hash of its id): on a node, the VMs of one tenant share one VM's CPU weight.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlmodel import Session, col, select

from api.calls.costs import UnitPrices, call_cost
from api.calls.errors import NODE_ERRORS, PackUnavailable, ToolTimedOut, ToolUnavailable
from api.calls.executor import Execution, Prepared
from api.calls.metering import ACTION_CALL, GIB_MS, PUBLISHER_MICROUSD, TOOL_CALL, VCPU_MS
from api.calls.nodeclient import NodeAnswer, NodeTarget, send_call, send_cancel
from api.calls.outputs import check_output
from api.calls.sessions import CallSessions
from api.calls.settings import CallSettings
from api.calls.tables import RUNNING, ActionCall
from api.errors import CallError
from api.models import Node, NodeCredential
from api.nodes import LiveNode, live_nodes, mark_bad, mark_unreachable
from api.rawsql import Reads
from http1.client import Http1

log = logging.getLogger("b3os.api")

PHASES = ("start", "copy", "unpack", "run", "collect", "delete")
_NODE_FIELDS_SKIPPED = ("code", "reason", "message", "retry_after")


def tenant_of(org_id: str) -> str:
    """The organization's name on nodes: the same for all its calls, and not its id."""
    return hashlib.sha256(f"b3os-tenant:{org_id}".encode()).hexdigest()[:32]


def _call_keys(session: Session, node_ids: list[str]) -> dict[str, str]:
    stmt = select(NodeCredential).where(
        col(NodeCredential.node_id).in_(node_ids), col(NodeCredential.revoked_at).is_(None)
    )
    return {c.node_id: c.call_key for c in session.exec(stmt)}


def next_report_s(live: list[LiveNode], *, now: dt.datetime, heartbeat_s: float) -> float:
    """Seconds until the live nodes have synced and reported once more (two heartbeat periods)."""
    if not live:
        return 2 * heartbeat_s
    oldest = min(n.last_seen for n in live)
    return max(1.0, (oldest - now).total_seconds() + 2 * heartbeat_s)


class VmExecutor:
    """Runs `vm` actions on the nodes."""

    tier = "vm"

    def __init__(
        self,
        *,
        db: CallSessions,
        settings: CallSettings,
        prices: UnitPrices,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self._db = db
        self._settings = settings
        self._prices = prices
        self._clock = clock
        self._nodes = Http1()  # to the nodes

    async def aclose(self) -> None:
        """Close the HTTP client to the nodes."""
        await self._nodes.aclose()

    def read(self, reads: Reads, prepared: Prepared, *, org_id: str) -> Prepared:
        """The live nodes that have the exact version installed (with their call keys), or
        `503 pack_unavailable`."""
        settings, resolved = self._settings, prepared.resolved
        now = self._clock()
        tag = f"{resolved.pack}@{resolved.version}"
        live = live_nodes(reads, now=now, max_age_s=settings.node_live_s)
        nodes = [n for n in live if tag in n.installed]
        if not nodes:
            raise PackUnavailable(
                f"{resolved.ref}: no node has {resolved.pack} {resolved.version} installed yet "
                "(or it failed verification there)",
                retry_after=next_report_s(live, now=now, heartbeat_s=settings.node_heartbeat_s),
                details={"ref": str(resolved.ref)},
            )
        return replace(prepared, nodes=nodes)

    async def prepare(self, prepared: Prepared, *, org_id: str) -> Prepared:
        """Nothing more: `read` found the nodes."""
        return prepared

    async def cancel(self, call: ActionCall) -> str:
        """Ask the call's node to kill its VM at once."""

        def target(session: Session) -> NodeTarget | None:
            node = session.get(Node, call.node_id)
            keys = _call_keys(session, [call.node_id])
            return NodeTarget(node.url, node.node_id, keys[node.node_id]) if node and keys else None

        node: NodeTarget | None = await self._db.run(target)
        if node is None:
            return "unreachable"
        return await send_cancel(self._nodes, node=node, call_id=call.id)

    async def execute(self, call: ActionCall, prepared: Prepared) -> Execution:
        """Send the call to its node and read the outcome, usage and phases."""
        settings, resolved, checked = self._settings, prepared.resolved, prepared.checked
        node = next(n for n in prepared.nodes if n.node_id == call.node_id)
        impl = resolved.action.impl
        body = {
            "call_id": call.id,
            "pack": resolved.pack,
            "version": resolved.version,
            "action": resolved.ref.action,
            "cmd": list(getattr(impl, "cmd", [])),
            "timeout_ms": call.timeout_ms,
            "max_output_bytes": settings.max_output_bytes,
            "input": checked.wire(),
            "file_fields": checked.file_fields,
            "output_file_fields": resolved.action.file_fields("output"),
            "tenant": tenant_of(call.org_id),
            **self._more(call, prepared),
        }
        reply = await send_call(
            self._nodes,
            node=NodeTarget(node.url, node.node_id, node.call_key),
            body=body,
            timeout_s=call.timeout_ms / 1000 + settings.call_overhead_s,
        )
        if reply.elsewhere:
            return Execution(error=await self._node_error(reply, call), elsewhere=True)
        result = reply.result
        await self._after(call, prepared, result)
        usage: dict[str, Any] = result["usage"] if isinstance(result.get("usage"), dict) else {}
        timings: dict[str, Any] = result["timings"] if isinstance(result.get("timings"), dict) else {}
        ran = bool(result.get("ran")) and reply.status == 200
        vcpu_ms, gib_ms = (_int(usage.get("vcpu_ms")), _int(usage.get("gib_ms"))) if ran else (0, 0)
        error: CallError | None = None
        output: Any = None
        if reply.status == 200 and result.get("ok") is True:
            try:
                output = check_output(resolved.action.output_schema, result.get("output"))
            except CallError as exc:
                error = exc
        else:
            error = self._refine(await self._node_error(reply, call), prepared)
        cost_started = time.perf_counter()
        # a cancelled call is never charged the price, even if its tool answered just before the kill
        answered = error is None and result.get("cancelled") is not True
        cost = call_cost(
            self._prices, ran=ran, answered=answered, vcpu_ms=vcpu_ms, gib_ms=gib_ms, price=prepared.price
        )
        requests = _int(usage.get("requests")) if ran else 0
        if requests:  # a js call's exchanges through the egress proxy, each an HTTP action's floor
            cost = replace(cost, floor=cost.floor + requests * self._prices.action_call_microusd)
        phases = {p: round(float(timings.get(p) or 0.0), 3) for p in PHASES}
        phases["cost"] = round((time.perf_counter() - cost_started) * 1000, 3)
        units = [(VCPU_MS, vcpu_ms), (GIB_MS, gib_ms), (TOOL_CALL, 1)] if ran else []
        if requests:
            units.append((ACTION_CALL, requests))
        if ran and cost.price > 0:
            units.append((PUBLISHER_MICROUSD, cost.price))
        return Execution(
            output=output,
            error=error,
            ran=ran,
            cost=cost,
            units=units,
            vcpu_ms=vcpu_ms,
            gib_ms=gib_ms,
            phases=phases,
        )

    def _more(self, call: ActionCall, prepared: Prepared) -> dict[str, Any]:
        """Fields of the node call beside the tool's (a js call's `js`)."""
        return {}

    async def _after(self, call: ActionCall, prepared: Prepared, result: dict[str, Any]) -> None:
        """What the kind keeps of the node's answer (a js call's refreshed tokens)."""

    def _refine(self, error: CallError, prepared: Prepared) -> CallError:
        """The call's error as the kind names it (a js call's pack error)."""
        return error

    async def _node_error(self, reply: NodeAnswer, call: ActionCall) -> CallError:
        result = reply.result
        err: dict[str, Any] = result["error"] if isinstance(result.get("error"), dict) else {}
        if reply.status == 0:
            if reply.unproven:
                until = self._clock() + dt.timedelta(seconds=self._settings.node_bad_s)
                log.warning("node %s answered without its proof: no calls until %s", call.node_id, until)
                await self._db.run(lambda s: mark_bad(s, node_id=call.node_id, until=until))
                return ToolUnavailable(f"{reply.failure}; nothing was billed", reason="exec", retry_after=1.0)
            if reply.timed_out:
                return ToolTimedOut(f"{reply.failure}: the call did not finish within {call.timeout_ms} ms")
            if reply.gone:  # the retry goes to another node, or to this one once it heartbeats again
                failed_at = self._clock()
                await self._db.run(lambda s: mark_unreachable(s, node_id=call.node_id, at=failed_at))
                return ToolUnavailable(
                    f"{reply.failure}; nothing was billed",
                    reason="exec",
                    retry_after=self._settings.node_heartbeat_s,
                )
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

    async def _node_retry_after(self, call: ActionCall) -> float:
        """When the node may have a slot again: the soonest deadline of its other running calls, else its
        next heartbeat."""
        now = self._clock()
        heartbeat_s = self._settings.node_heartbeat_s

        def soonest(session: Session) -> float:
            deadlines = session.exec(
                select(ActionCall.deadline_at).where(
                    col(ActionCall.node_id) == call.node_id,
                    col(ActionCall.state) == RUNNING,
                    col(ActionCall.id) != call.id,
                    col(ActionCall.lease_expires_at) > now,
                )
            ).all()
            if deadlines:
                return (min(deadlines) - now).total_seconds()
            return heartbeat_s

        value: float = await self._db.run(soonest)
        return value


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def _float(value: Any) -> float | None:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
    )
