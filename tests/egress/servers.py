"""Real HTTPS upstreams on loopback and a real egress proxy, for the egress tests and any other test dir.

- `make_ca()` / `write_ca(ca, path)`: a trustme CA and its PEM file (B3OS_EGRESS_CA_FILE).
- `Upstream(ca, ["api.example.com"])`: a threaded HTTPS server on 127.0.0.1 with a certificate for
  those names; it records every request (`requests`) and answers what `on(path, reply)` scripted
  (404 otherwise). `connect_to()` is its B3OS_EGRESS_CONNECT_TO entry (`name:443:127.0.0.1:PORT`).
- `proxy_env(ca_file, *upstreams)`: the B3OS_EGRESS_* variables that reach those upstreams.
- `start_proxy(env, tmp)`: `b3os egress run` as a subprocess; a `ProxyProcess` with url, token,
  public key, log file and `stop()`.
- `in_process_proxy(...)`: the same app in-process over httpx's ASGITransport (async context manager).

From another test directory: `sys.path.insert(0, str(Path(__file__).parents[1] / "egress"))`, then
`from servers import Upstream, start_proxy, ...` (tests/egress has no `__init__.py`: a package named
`egress` there would shadow the real one).
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import loopback
import trustme
from workers import PATIENCE_S, free_port

from egress.sealing import connection_binding, seal

REPO = Path(__file__).resolve().parents[2]


def make_ca() -> trustme.CA:
    """A fresh test CA."""
    return trustme.CA()


def write_ca(ca: trustme.CA, path: Path) -> Path:
    """Write the CA's certificate (PEM) to `path`; the path."""
    ca.cert_pem.write_to_path(str(path))
    return path


@dataclass
class Recorded:
    """One request an upstream received."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def header(self, name: str) -> str | None:
        """The first value of a header (case-insensitive), or None."""
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)

    def raw(self) -> bytes:
        """Everything received, to search for bytes that must never arrive."""
        lines = [f"{self.method} {self.target}", *(f"{n}: {v}" for n, v in self.headers)]
        return "\n".join(lines).encode("latin-1") + b"\n\n" + self.body


@dataclass
class Reply:
    """A scripted answer; `hold` makes the server wait (until the upstream closes) before answering."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    hold: bool = False


Responder = Callable[[Recorded], Reply]


class Upstream:
    """A loopback HTTPS server under real-looking host names (see the module docstring)."""

    def __init__(self, ca: trustme.CA, names: Sequence[str], *, cert_names: Sequence[str] | None = None):
        self.names = list(names)
        self.requests: list[Recorded] = []
        self.routes: dict[str, Reply | Responder] = {}
        self.release = threading.Event()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*(cert_names or names)).configure_cert(context)
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Recorded(self.command, self.path, list(self.headers.items()), body)
                upstream.requests.append(request)
                route = upstream.routes.get(request.path)
                reply = Reply(404, body=b"not found") if route is None else route
                if callable(reply):
                    reply = reply(request)
                if reply.hold:
                    upstream.release.wait(30)
                self.send_response(reply.status)
                names = {n.lower() for n, _ in reply.headers}
                for name, value in reply.headers:
                    self.send_header(name, value)
                if "content-length" not in names:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hangs up mid-answer (a cut-off body) is expected here

            def get_request(self) -> tuple[Any, Any]:
                # headers and body go out as two writes: without TCP_NODELAY the body waits for the
                # client's delayed ACK (40 ms), which real servers do not make their clients wait
                conn, address = super().get_request()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return conn, address

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return self.names[0]

    def on(self, path: str, reply: Reply | Responder) -> None:
        """Answer requests to `path` (without query) with `reply` (or what the callable returns)."""
        self.routes[path] = reply

    def hits(self, path: str) -> int:
        return sum(1 for r in self.requests if r.path == path)

    def received(self, needle: bytes) -> bool:
        """Whether any request this upstream got contains `needle` anywhere."""
        return any(needle in r.raw() for r in self.requests)

    def connect_to(self) -> str:
        return ",".join(f"{name}:443:127.0.0.1:{self.port}" for name in self.names)

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


def proxy_env(ca_file: Path, *upstreams: Upstream, extra_connect_to: Sequence[str] = ()) -> dict[str, str]:
    """B3OS_EGRESS_CA_FILE and B3OS_EGRESS_CONNECT_TO reaching these upstreams."""
    entries = [u.connect_to() for u in upstreams] + list(extra_connect_to)
    return {"B3OS_EGRESS_CA_FILE": str(ca_file), "B3OS_EGRESS_CONNECT_TO": ",".join(entries)}


def sealed_credential(
    public_key: str, payload: dict[str, Any], *, id: str = "conn_a", org_id: str = "org_x"
) -> dict[str, str]:
    """A credential of a fetch request: `payload` sealed to the proxy for (org_id, id)."""
    return {
        "id": id,
        "org_id": org_id,
        "sealed": seal(public_key, payload, binding=connection_binding(org_id, id)),
    }


def basic_value(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


@dataclass
class ProxyProcess:
    """A running `b3os egress run`."""

    url: str
    token: str
    public_key: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def log_bytes(self) -> bytes:
        return self.log.read_bytes()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start_proxy(
    env: Mapping[str, str], tmp: Path, *, token: str | None = None, log_level: str = "info"
) -> ProxyProcess:
    """Start `b3os egress run` on a free loopback port with `env` added; wait until it answers."""
    token = token or secrets.token_urlsafe(24)
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_EGRESS_")}
    full.update({"B3OS_EGRESS_TOKEN": token, "B3OS_EGRESS_KEY_FILE": str(tmp / "egress.key"), **env})
    b3os = Path(sys.executable).parent / "b3os"
    argv = [str(b3os)] if b3os.exists() else [sys.executable, "-m", "cli"]
    argv += ["egress", "run", "--port", str(port), "--log-level", log_level]
    log = tmp / f"egress-{port}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, env=full, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    proxy = ProxyProcess(f"http://127.0.0.1:{port}", token, "", popen, log)
    deadline = time.monotonic() + PATIENCE_S
    while True:
        if popen.poll() is not None or time.monotonic() > deadline:
            proxy.stop()
            raise AssertionError(f"the egress proxy did not start:\n{log.read_text()[-3000:]}")
        try:
            answer = loopback.get(f"{proxy.url}/v1/egress/public-key", headers=proxy.headers, timeout=2)
            if answer.status_code == 200:
                proxy.public_key = answer.json()["public_key"]
                return proxy
        except httpx.TransportError:
            pass
        time.sleep(0.05)


@dataclass
class InProcessProxy:
    """The proxy app in-process: an httpx client over ASGITransport, and what tests need of it."""

    client: httpx.AsyncClient
    public_key: str
    key_file: Path
    token: str

    async def fetch(self, **request: Any) -> dict[str, Any]:
        """POST /v1/egress/fetch with `request` (method GET by default); the JSON answer (HTTP 200)."""
        request.setdefault("method", "GET")
        answer = await self.client.post(
            "/v1/egress/fetch", json=request, headers={"Authorization": f"Bearer {self.token}"}
        )
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def seal(self, payload: dict[str, Any], *, id: str = "conn_a", org_id: str = "org_x") -> dict[str, str]:
        return sealed_credential(self.public_key, payload, id=id, org_id=org_id)


@asynccontextmanager
async def in_process_proxy(
    env: Mapping[str, str], key_file: Path, *, token: str = "test-egress-token", **app_options: Any
) -> AsyncIterator[InProcessProxy]:
    """`create_app` with settings from `env` (B3OS_EGRESS_* names), served in-process."""
    from egress.app import create_app
    from egress.config import EgressSettings

    fields = {k.removeprefix("B3OS_EGRESS_").lower(): v for k, v in env.items()}
    settings = EgressSettings(token=token, key_file=key_file, **fields)
    app = create_app(settings, **app_options)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://egress", timeout=30) as client:
        yield InProcessProxy(client, app.state.public_key, key_file, token)
    await app.state.pool.aclose()
