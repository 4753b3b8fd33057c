"""A lean HTTP/1.1 client for the platform's own busiest requests: the api's calls to its nodes and the
routine worker's step calls to the api. Keep-alive connections, one request at a time on each.

A general client's layers (httpx: its request and response models, cookies, auth and redirect hooks,
transports) were about a fifth of the api's CPU per call and of the worker's in a burst of runs. This
client does only what those paths need: POST a body with the given headers, read the status, headers
and body (parsed by httptools, the parser uvicorn uses), keep the connection for the next request
unless either side closes it. It never follows redirects; https is verified with the system's
certificates (as the SDK does); `HTTP(S)_PROXY` is not used: these are the platform's own hops between
its processes.

Failures are raised as `Http1Error`: `ConnectFailed` (refused, unreachable, no such name: nothing was
sent), `TimedOut` (connecting or answering took too long) or `TransportFailed` (the connection broke
mid-way, the answer was not HTTP or was larger than `MAX_ANSWER_BYTES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""Far past any answer these paths expect (a node's: its stdout, 1 MiB, and output files, 256 KiB, in
JSON; the api's: a step's output)."""
IDLE_S = 4.0
"""A kept connection idle longer than this is closed rather than reused: uvicorn closes idle connections
after 5 s, and a request written as the server closes would be lost."""
MAX_IDLE_PER_ORIGIN = 50
READ_CHUNK = 65536


class Http1Error(Exception):
    """A request that got no complete answer."""


class ConnectFailed(Http1Error):
    """No connection: nothing was sent."""


class TimedOut(Http1Error):
    """Connecting or answering took longer than allowed."""


class TransportFailed(Http1Error):
    """The connection broke, or what came back was not an answer."""


class Headers(dict[str, str]):
    """A response's headers, by name in lower case; looked up in any case."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


@dataclass(frozen=True)
class Response:
    """An answer: status, headers and body (named as httpx names them)."""

    status_code: int
    headers: Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class _Parsed:
    """httptools' callbacks for one response."""

    def __init__(self) -> None:
        self.headers = Headers()
        self.chunks: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # after the message, llhttp no longer knows

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        self.too_large = self.size > MAX_ANSWER_BYTES
        if not self.too_large:
            self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def reusable(self, now: float) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof() and now - self.idle_since < IDLE_S

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Http1:
    """Keep-alive HTTP/1.1 connections by origin (scheme, host, port); `base_url` prefixes relative paths."""

    def __init__(self, base_url: str = "") -> None:
        self._base = base_url.rstrip("/")
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None

    async def post(
        self, url: str, *, content: bytes, headers: dict[str, str], timeout_s: float, connect_s: float
    ) -> Response:
        """POST `content` to `url` (or to `base_url` + `url` when it starts with `/`) and read the whole
        answer within `timeout_s` (connecting within `connect_s`, which counts towards it)."""
        full = self._base + url if url.startswith("/") else url
        parts = urlsplit(full)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"not an http(s) URL: {full!r}")
        origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"POST {target} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(content)}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content
        try:
            async with asyncio.timeout(timeout_s):
                conn = await self._connection(origin, connect_s)
                try:
                    response, keep = await _exchange(conn, request)
                except BaseException:
                    conn.close()
                    raise
        except TimeoutError:
            raise TimedOut(f"no answer from {parts.netloc} within {timeout_s:g} s") from None
        if keep:
            self._release(origin, conn)
        else:
            conn.close()
        return response

    async def _connection(self, origin: tuple[str, str, int], connect_s: float) -> _Connection:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable(now):
                return conn
            conn.close()
        scheme, host, port = origin
        tls = self._tls_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(connect_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, limit=READ_CHUNK)
        except TimeoutError:
            raise TimedOut(f"could not connect to {host}:{port} within {connect_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"could not connect to {host}:{port}: {exc}") from None
        return _Connection(reader, writer)

    def _release(self, origin: tuple[str, str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= MAX_IDLE_PER_ORIGIN:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def aclose(self) -> None:
        """Close every kept connection."""
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


async def _exchange(conn: _Connection, request: bytes) -> tuple[Response, bool]:
    """Write one request and read its answer; whether the connection may carry another."""
    parsed = _Parsed()
    try:
        conn.writer.write(request)
        await conn.writer.drain()
        while not parsed.complete:
            data = await conn.reader.read(READ_CHUNK)
            if not data:
                raise TransportFailed("the connection closed before the answer was complete")
            parsed.parser.feed_data(data)
            if parsed.too_large:
                raise TransportFailed(f"the answer was larger than {MAX_ANSWER_BYTES} bytes")
    except (OSError, ssl.SSLError) as exc:
        raise TransportFailed(f"the connection failed ({type(exc).__name__})") from None
    except httptools.HttpParserError as exc:
        raise TransportFailed(f"the answer was not HTTP ({type(exc).__name__})") from None
    response = Response(parsed.parser.get_status_code(), parsed.headers, b"".join(parsed.chunks))
    return response, parsed.keep_alive
