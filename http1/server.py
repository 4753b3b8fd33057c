"""The HTTP/1.1 protocol every server of the platform runs under uvicorn (the api, the node, the egress
proxy): uvicorn's httptools protocol with bounds on what a client may make it hold.

uvicorn bounds neither the size of a request's head nor the time a client takes to send it: 8 requests
with 64 MB of headers were answered 200 (the api grew to 800 MB), and 200 connections sending a byte a
second stayed open as long as they liked. Here:

- **The head** (request line and headers) may be at most `max_head_bytes`: past it, the answer is
  `431 headers_too_large` and the connection is closed, having held at most that and one read.
- **Time**: the head must arrive within `head_timeout_s` of the connection's first byte (or of its
  start, or of the byte that began the request), and the body within `body_timeout_s` of the head.
  Past either, the answer is `408 request_timeout` (no answer to a connection that sent nothing) and the
  connection is closed. What the server does once the request is in is not bounded here.
- **Idle keep-alive**: uvicorn closes a connection idle `--timeout-keep-alive` seconds (5) after an answer.

An answer's head goes out with its body's first part in one write (`HeadWithBody`).

Settings (environment, every server): `B3OS_HTTP_MAX_HEAD_BYTES` (16 KiB, as Node's and h11's default),
`B3OS_HTTP_HEAD_TIMEOUT_S` (10), `B3OS_HTTP_BODY_TIMEOUT_S` (60). uvicorn takes the protocol by name:
`uvicorn --http http1.server:BoundedHttp ...` (`SERVER_PROTOCOL`), or `http=BoundedHttp` in `uvicorn.run`.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import Any, cast

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

SERVER_PROTOCOL = "http1.server:BoundedHttp"
"""`BoundedHttp` as uvicorn's `--http` names it."""


class HttpLimits(BaseSettings):
    """What a client may make a server of the platform hold (environment: `B3OS_HTTP_...`)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_HTTP_", extra="ignore")

    max_head_bytes: int = Field(default=16 * 1024, ge=1024)
    head_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=60.0, gt=0)


@cache
def limits() -> HttpLimits:
    """The limits of this process (read once)."""
    return HttpLimits()


_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


def refusal(status: int, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 answer that closes the connection, with the platform's error body."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class HeadWithBody:
    """A request's transport that sends its answer's status line and headers in one write with the body's
    first part.

    uvicorn writes the head and then the body, and asyncio sends each at once (its sockets set
    TCP_NODELAY): two TCP segments, so the client's side wakes and reads twice for one small answer and
    the server makes two sends. The head is held until the body's first write, or at the latest until the
    end of the event loop's step that wrote it, so a streamed answer whose first part waits still shows its
    head at once. A `100 Continue` (written before the answer starts) is not held.
    """

    def __init__(self, transport: asyncio.Transport, cycle: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._cycle = cycle
        self._loop = loop
        self._head: bytes | None = None
        self._held = False  # the answer's head has been written (held, then sent)

    def write(self, data: bytes) -> None:
        """Write `data`; the answer's head is held for the next write or the end of this step."""
        if self._head is not None:
            data, self._head = self._head + data, None
        elif self._cycle.response_started and not self._held:
            self._head, self._held = data, True
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        """Send a held head, then close."""
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head past the limit."""


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head, and bounded times to send the head and the body."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits()
        self._reading_head = True  # between a request's first byte (or the connection's start) and its head
        self._head_bytes = 0  # bytes received while the head was still open
        self._started = False  # any byte received on the connection
        self._too_large = False
        self._deadline: asyncio.TimerHandle | None = None

    # --- the connection --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._limits.head_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._started = True
        if self._deadline is None and not self._answering():  # bytes after an answer (a new request)
            self._reading_head, self._head_bytes = True, 0
            self._arm(self._limits.head_timeout_s)
        if self._reading_head:
            self._head_bytes += len(data)
        super().data_received(data)
        over = self._reading_head and self._head_bytes > self._limits.max_head_bytes
        if over and not self._too_large and not self.transport.is_closing():  # a head still coming
            self._too_large = True
            self.send_400_response("")

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to what the parser refused; a head past the limit gets 431 instead."""
        if not self._too_large:
            super().send_400_response(msg)
            return
        self._disarm()
        most = self._limits.max_head_bytes
        message = f"the request line and headers are longer than {most:,} bytes, the most this server reads"
        self.transport.write(refusal(431, "headers_too_large", message))
        self.transport.close()

    # --- the parser's callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._reading_head:  # a request after one whose answer was not awaited (pipelined)
            self._reading_head, self._head_bytes = True, 0
            self._arm(self._limits.head_timeout_s)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self._limits.max_head_bytes:  # a head that came whole in one read
            self._too_large = True
            raise _HeadTooLarge
        self._reading_head = False
        self._arm(self._limits.body_timeout_s)
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not None and self.cycle is not before:  # a request's cycle (not an upgrade)
            # the cycle's transport (HeadWithBody passes all but `write` and `close` on to the real one)
            held = HeadWithBody(self.transport, self.cycle, self.loop)
            self.cycle.transport = cast(asyncio.Transport, held)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        idle = not self.pipeline
        super().on_response_complete()
        if idle:  # the next byte begins a new request
            self._reading_head, self._head_bytes = True, 0

    # --- the deadline ---------------------------------------------------------------------------------

    def _answering(self) -> bool:
        """Whether a request is in and its answer not yet complete."""
        return self.cycle is not None and not self.cycle.response_complete and not self.cycle.more_body

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._timed_out, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self, seconds: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._started and (self.cycle is None or not self.cycle.response_started):
            part = "line and headers" if self._reading_head else "body"
            message = f"the request's {part} did not arrive within {seconds:g} s"
            self.transport.write(refusal(408, "request_timeout", message))
        self.transport.close()
