"""A js call's only way out: a unix socket in its VM (`/in/egress.sock`), relayed to the egress proxy.

The node listens on the socket for the length of the call. Each connection carries one request, one JSON
line `{"method", "url", "headers": [[name, value], ...], "body": <base64> | null}`, and gets one JSON answer:
the proxy's (`{"status", "headers", "body", "url", "redirects"}`) or `{"error": {"reason", "message"}}`.
The node adds the call's grant, which the api signed for this call only (its pack's egress list, the
sealed credentials of the connections the action declares, an expiry: `egress/grants.py`), and the time
left; the proxy checks the grant, the allow-list and the addresses, and injects the credentials. The code
in the VM never sees the grant or a secret; a request to the socket is worth exactly what `fetch` is.

Bounds per call: `MAX_REQUESTS` requests, `MAX_AT_ONCE` at a time, `MAX_REQUEST_BYTES` per request.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any

import httpx

RELAY_PATH = "/v1/egress/relay"
MAX_REQUESTS = 100
MAX_AT_ONCE = 4
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_BODY_BYTES = 1024 * 1024


def _refusal(reason: str, message: str) -> dict[str, Any]:
    return {"error": {"reason": reason, "message": message}}


class Relay:
    """Serves one call's socket until `close`."""

    def __init__(
        self,
        listener: socket.socket,
        *,
        egress_url: str | None,
        grant: str,
        deadline: float,
        client: httpx.Client | None = None,
    ) -> None:
        self._listener = listener
        self._url = egress_url.rstrip("/") + RELAY_PATH if egress_url else None
        self._grant = grant
        self._deadline = deadline
        self._slots = threading.BoundedSemaphore(MAX_AT_ONCE)
        self._count = 0
        self._lock = threading.Lock()
        self._closed = False
        self._own_client = client is None
        self._client = client or httpx.Client(follow_redirects=False)
        self.requests = 0
        self.refreshed: list[dict[str, str]] = []  # OAuth2 tokens the proxy refreshed, sealed, for the api
        self._thread = threading.Thread(target=self._serve, name="b3os-js-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting and close the socket (requests under way end with the call's VM)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=2)
        if self._own_client:
            self._client.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._count += 1
                over = self._count > MAX_REQUESTS
            if over:
                self._reply(conn, _refusal("too_many", f"a call may make at most {MAX_REQUESTS} requests"))
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with self._slots:
            try:
                raw = self._read(conn)
                answer = (
                    self._forward(raw)
                    if raw is not None
                    else _refusal(
                        "bad_request", f"a request is one JSON line of at most {MAX_REQUEST_BYTES} bytes"
                    )
                )
            except OSError:
                conn.close()
                return
            self._reply(conn, answer)

    def _read(self, conn: socket.socket) -> bytes | None:
        conn.settimeout(max(0.01, self._deadline - time.monotonic()))
        data = bytearray()
        while b"\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                return None
        return bytes(data)

    def _forward(self, raw: bytes) -> dict[str, Any]:
        try:
            request = json.loads(raw)
        except ValueError:
            return _refusal("bad_request", "the request is not JSON")
        if not isinstance(request, dict) or set(request) - {"method", "url", "headers", "body"}:
            return _refusal("bad_request", "a request has only method, url, headers and body")
        if self._url is None:
            return _refusal("egress_down", "this node has no egress proxy (B3OS_EGRESS_URL)")
        left_ms = int((self._deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return _refusal("timeout", "the call's time is up")
        with self._lock:
            self.requests += 1
        body = {**request, "grant": self._grant, "timeout_ms": left_ms, "max_body_bytes": MAX_BODY_BYTES}
        try:
            resp = self._client.post(self._url, json=body, timeout=left_ms / 1000 + 1)
            answer = resp.json()
        except (httpx.HTTPError, ValueError):
            return _refusal("egress_down", "the egress proxy cannot be reached")
        if not isinstance(answer, dict):
            return _refusal("egress_down", "the egress proxy answered nothing readable")
        if resp.status_code != 200:
            err: dict[str, Any] = answer["error"] if isinstance(answer.get("error"), dict) else {}
            return _refusal(str(err.get("code") or "refused"), str(err.get("message") or "refused"))
        refreshed = answer.pop("refreshed", None)  # sealed tokens are the api's business, not the code's
        if isinstance(refreshed, list):
            with self._lock:
                self.refreshed += [r for r in refreshed if isinstance(r, dict)][:32]
        return answer

    @staticmethod
    def _reply(conn: socket.socket, answer: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")
        conn.close()
