"""The `http` executor: a declarative action's request, sent through the egress proxy.

    prepare: the organization's connections for the action (400 connection_missing when one is not
             added), the request template evaluated (`api.calls.http_template`), the host checked
             against the pack's egress                       -- all before admission, nothing billed
    execute: POST the request to the egress proxy (`b3os egress run`), which checks the allow-list and
             the addresses again, injects the credentials and follows redirects; read the answer:
             success, map, outputSchema, errors[] -> pack_error

The api never holds a secret: it forwards each connection's sealed token, which only the proxy can
open; a token the proxy refreshed (OAuth2) comes back sealed and replaces the stored one.

Outcomes, beside the seed's (each sentence names the host or the status, never a secret); the
full table is in docs/api.md:

- `502 action_failed`, reason `status` (the upstream's status failed `response.success`: with
  `upstream_status`, and `pack_error` and `retryable` when an `errors[]` entry matched),
  `output_invalid` (with `errors`), `not_json`, `map`, `body_too_large` (over 1 MiB), `redirects`
  (more than 5), `egress_refused` (not https, a host outside `egress`, or a private address),
  `connect`, `tls`, `template`, `credential`, `cancelled`: billed the `actions.call` floor when the
  request was sent.
- `504 action_timed_out`: the upstream did not answer within the call's time; billed the floor.
- `429 rate_limited`, reason `upstream`: the upstream answered 429; `Retry-After` is the upstream's
  (1 s when it gave none, at most an hour); nothing billed.
- `503 action_unavailable`, reason `upstream` (the upstream answered 503, its `Retry-After`) or
  `egress` (the proxy cannot be reached or is not configured); nothing billed.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import replace
from typing import Any

import httpx

from api.calls.costs import UnitPrices, http_call_cost
from api.calls.errors import ActionFailed, ActionTimedOut, ActionUnavailable
from api.calls.executor import Execution, Prepared
from api.calls.http_template import read_response, render_request, response_scope
from api.calls.inputs import schema_errors
from api.calls.metering import ACTION_CALL, PUBLISHER_MICROUSD
from api.calls.needed import needed_connections, store_refreshed
from api.calls.sessions import CallSessions
from api.calls.tables import ActionCall
from api.errors import CallError, RateLimited
from api.rawsql import Reads
from b3os import retry_after_seconds
from packs.manifest import HttpImpl
from telemetry import tracing

FETCH_PATH = "/v1/egress/fetch"
MAX_BODY_BYTES = 1024 * 1024
MAX_REDIRECTS = 5
MAX_RETRY_AFTER_S = 3600.0
EGRESS_RETRY_S = 2.0
_REASONS = {
    "egress_refused": "egress_refused",
    "private_address": "egress_refused",
    "redirects": "redirects",
    "body_too_large": "body_too_large",
    "connect": "connect",
    "tls": "tls",
    "credential": "credential",
    "credential_conflict": "credential",
    "refresh_failed": "credential",
}


def retry_after_s(value: str | None) -> float:
    """Seconds from an upstream `Retry-After` (seconds or an HTTP date, by the SDK's one parser), 1 when
    absent or unreadable, at most an hour."""
    seconds = retry_after_seconds(value)
    return min(max(seconds if seconds is not None else 1.0, 1.0), MAX_RETRY_AFTER_S)


class HttpExecutor:
    """Runs `http` actions through the egress proxy."""

    tier = "http"

    def __init__(
        self, *, db: CallSessions, prices: UnitPrices, egress_url: str | None, egress_token: str | None
    ) -> None:
        self._db = db
        self._prices = prices
        self._client: httpx.AsyncClient | None = None  # to the egress proxy, made on first use
        self._url = egress_url.rstrip("/") if egress_url else None
        self._token = egress_token
        self._running: dict[str, asyncio.Task[Any]] = {}

    async def aclose(self) -> None:
        """Close the HTTP client to the egress proxy."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _egress(self) -> httpx.AsyncClient:
        """The HTTP client to the egress proxy (it never follows redirects: the proxy does)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50), follow_redirects=False
            )
        return self._client

    def read(self, reads: Reads, prepared: Prepared, *, org_id: str) -> Prepared:
        """Nothing: `prepare` reads the connections (only when the action needs some)."""
        return prepared

    async def prepare(self, prepared: Prepared, *, org_id: str) -> Prepared:
        """The connections, the evaluated request and its egress check; raises before anything is sent."""
        resolved = prepared.resolved
        impl = resolved.action.impl
        assert isinstance(impl, HttpImpl)
        if self._url is None:
            raise ActionUnavailable(
                "this api has no egress proxy configured (B3OS_EGRESS_URL, B3OS_EGRESS_TOKEN), so it runs "
                "no HTTP actions; nothing was billed",
                reason="egress",
                retry_after=EGRESS_RETRY_S,
            )
        needed = list(resolved.action.connections)
        rows = await needed_connections(self._db, resolved, org_id=org_id)
        scope = {
            "input": prepared.checked.value,
            "connections": {key: dict(rows[key].params or {}) for key in needed},
        }
        started = time.perf_counter()
        rendered = render_request(impl.request, scope, resolved.manifest.egress_hosts)
        credentials = [{"id": rows[key].id, "org_id": org_id, "sealed": rows[key].sealed} for key in needed]
        state = {
            "request": rendered,
            "scope": scope,
            "credentials": credentials,
            "template_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        return replace(prepared, state=state)

    async def cancel(self, call: ActionCall) -> str:
        """Abandon the call's request when this api process runs it."""
        task = self._running.get(call.id)
        if task is None:
            return "unknown"
        task.cancel()
        return "stopped"

    async def execute(self, call: ActionCall, prepared: Prepared) -> Execution:
        """Send the request through the proxy and read the answer."""
        phases = {"template": prepared.state["template_ms"]}
        started = time.perf_counter()
        task = asyncio.ensure_future(self._fetch(call, prepared))
        self._running[call.id] = task
        try:
            answer = await task
        except asyncio.CancelledError:
            if task.cancelled() and not _current_cancelled():
                return self._ended(
                    ActionFailed("the call was cancelled while its request ran", reason="cancelled"),
                    sent=True,
                    price=prepared.price,
                    phases=phases,
                )
            raise
        finally:
            self._running.pop(call.id, None)
        phases["egress"] = round((time.perf_counter() - started) * 1000, 3)
        timings: dict[str, Any] = answer["timings"] if isinstance(answer.get("timings"), dict) else {}
        phases["upstream"] = round(float(timings.get("upstream_ms") or 0.0), 3)
        await store_refreshed(
            self._db,
            org_id=call.org_id,
            sent=prepared.state["credentials"],
            refreshed=answer.get("refreshed"),
        )
        if isinstance(answer.get("error"), dict):
            return self._proxy_error(answer["error"], call, prepared.price, phases)
        map_started = time.perf_counter()
        error, output = self._read(answer, prepared)
        phases["map"] = round((time.perf_counter() - map_started) * 1000, 3)
        if isinstance(error, RateLimited | ActionUnavailable):
            return self._ended(error, sent=False, price=prepared.price, phases=phases)
        return self._ended(error, sent=True, price=prepared.price, phases=phases, output=output)

    async def _fetch(self, call: ActionCall, prepared: Prepared) -> dict[str, Any]:
        rendered = prepared.state["request"]
        body = {
            "method": rendered.method,
            "url": rendered.url,
            "headers": [list(h) for h in rendered.headers],
            "body": base64.b64encode(rendered.body).decode() if rendered.body is not None else None,
            "egress": prepared.resolved.manifest.egress_hosts,
            "credentials": prepared.state["credentials"],
            "timeout_ms": call.timeout_ms,
            "max_body_bytes": MAX_BODY_BYTES,
            "max_redirects": MAX_REDIRECTS,
        }
        try:
            response = await self._egress().post(
                f"{self._url}{FETCH_PATH}",
                json=body,
                headers=tracing.injected({"Authorization": f"Bearer {self._token}"}),
                timeout=httpx.Timeout(call.timeout_ms / 1000 + 5.0, connect=2.0),
            )
            answer = response.json()
        except (httpx.TransportError, ValueError):
            return {"error": {"reason": "egress_down", "sent": False}}
        if response.status_code != 200 or not isinstance(answer, dict):
            return {"error": {"reason": "egress_down", "sent": False, "status": response.status_code}}
        return answer

    def _proxy_error(
        self, error: dict[str, Any], call: ActionCall, price: int, phases: dict[str, float]
    ) -> Execution:
        reason = str(error.get("reason") or "")
        sent = error.get("sent") is True
        message = str(error.get("message") or "the egress proxy refused the request")
        if reason == "egress_down":
            failure: CallError = ActionUnavailable(
                "the egress proxy cannot be reached; nothing was billed",
                reason="egress",
                retry_after=EGRESS_RETRY_S,
            )
            return self._ended(failure, sent=False, price=price, phases=phases)
        if reason == "timeout":
            failure = ActionTimedOut(f"{message} (the call's time was {call.timeout_ms} ms)")
        else:
            failure = ActionFailed(message, reason=_REASONS.get(reason, "connect"))
        return self._ended(failure, sent=sent, price=price, phases=phases)

    def _read(self, answer: dict[str, Any], prepared: Prepared) -> tuple[CallError | None, Any]:
        impl = prepared.resolved.action.impl
        assert isinstance(impl, HttpImpl)
        status = int(answer.get("status") or 0)
        headers: list[list[str]] = answer["headers"] if isinstance(answer.get("headers"), list) else []
        try:
            raw = base64.b64decode(answer.get("body") or "")
        except ValueError:
            raw = b""
        response = response_scope(status, headers, raw)
        try:
            read = read_response(impl.response, prepared.state["scope"], response)
        except CallError as exc:
            return exc, None
        if read.ok:
            errors = schema_errors(prepared.resolved.action.output_schema, read.output, "output")
            if not isinstance(read.output, dict):
                kind = type(read.output).__name__
                errors = [{"path": "output", "message": f"must be a JSON object, not {kind}"}]
            if errors:
                first = errors[0]
                return ActionFailed(
                    "the action's output does not match its outputSchema: "
                    f"{first['path']}: {first['message']}",
                    reason="output_invalid",
                    details={"errors": errors},
                ), None
            return None, read.output
        host = prepared.state["request"].host
        upstream_retry = next((v for k, v in headers if str(k).lower() == "retry-after"), None)
        details: dict[str, Any] = {"upstream_status": status}
        if read.pack_error is not None:
            details["pack_error"] = read.pack_error
            details["retryable"] = read.retryable
        if status == 429:
            return RateLimited(
                f"{host} answered 429: the upstream asks to wait; nothing was billed",
                reason="upstream",
                retry_after=retry_after_s(upstream_retry),
                details=details,
            ), None
        if status == 503:
            return ActionUnavailable(
                f"{host} answered 503: the upstream is unavailable; nothing was billed",
                reason="upstream",
                retry_after=retry_after_s(upstream_retry),
                details=details,
            ), None
        if read.pack_error is not None:
            text = f"{prepared.resolved.pack}: {read.pack_error['code']}: {read.pack_error['message']}"
        else:
            text = f"{host} answered HTTP {status}, which the action does not count as success"
        return ActionFailed(text, reason="status", details=details), None

    def _ended(
        self,
        error: CallError | None,
        *,
        sent: bool,
        price: int,
        phases: dict[str, float],
        output: Any = None,
    ) -> Execution:
        started = time.perf_counter()
        cost = http_call_cost(self._prices, sent=sent, answered=error is None, price=price)
        phases["cost"] = round((time.perf_counter() - started) * 1000, 3)
        units = [(ACTION_CALL, 1)] if sent else []
        if cost.price > 0:
            units.append((PUBLISHER_MICROUSD, cost.price))
        return Execution(output=output, error=error, ran=sent, cost=cost, units=units, phases=phases)


def _current_cancelled() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
