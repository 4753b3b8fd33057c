"""`GET /metrics`: a process's Prometheus registry in the text format, as ASGI middleware.

Who may read it: a request from loopback that no proxy forwarded (no `Forwarded`, `X-Forwarded-For`
or `X-Real-IP` header: a reverse proxy on the same host must not open it to the world), or any
request with `Authorization: Bearer <B3OS_METRICS_TOKEN>`. Anyone else gets 401. The metrics carry
no organization, key or call id: labels are tiers, outcomes, codes, phases and limits.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Any

import prometheus_client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

prometheus_client.disable_created_metrics()  # no `_created` series: half the lines, nothing lost

METRICS_PATH = "/metrics"
_FORWARDED = frozenset({b"forwarded", b"x-forwarded-for", b"x-real-ip"})


def is_loopback(host: str | None) -> bool:
    """Whether an address is a loopback one (127.0.0.0/8, ::1)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsEndpoint:
    """Answers `GET /metrics` from `registry`; passes every other request to the app."""

    def __init__(self, app: Any, *, registry: CollectorRegistry, token: str = "") -> None:
        self.app = app
        self.registry = registry
        self._expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != METRICS_PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _send(send, 405, _error("method_not_allowed", "use GET"), b"application/json", allow=b"GET")
            return
        if not self.allowed(scope):
            message = "reading /metrics needs a loopback client or Authorization: Bearer <B3OS_METRICS_TOKEN>"
            await _send(send, 401, _error("unauthorized", message), b"application/json")
            return
        body = generate_latest(self.registry)
        await _send(send, 200, b"" if scope["method"] == "HEAD" else body, CONTENT_TYPE_LATEST.encode())

    def allowed(self, scope: dict[str, Any]) -> bool:
        """Loopback and not proxied, or the metrics token."""
        headers = scope.get("headers") or []
        if self._expected is not None:
            for name, value in headers:
                if name == b"authorization" and hmac.compare_digest(value, self._expected):
                    return True
        client = scope.get("client")
        if not is_loopback(client[0] if client else None):
            return False
        return not any(name in _FORWARDED for name, _ in headers)


def install_metrics(app: Any, registry: CollectorRegistry, *, token: str) -> None:
    """Serve `registry` at `/metrics` on a Starlette/FastAPI app (outside its other middleware)."""
    app.add_middleware(MetricsEndpoint, registry=registry, token=token)


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


async def _send(send: Any, status: int, body: bytes, content_type: bytes, allow: bytes | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if allow is not None:
        headers.append((b"allow", allow))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
