"""The bounded HTTP/1.1 protocol of every server of the platform (http1/server.py), on a real uvicorn over
loopback sockets, with a small app: heads past the limit get 431, heads and bodies that take too long
get 408, a connection that says nothing is closed, and what stays within the bounds is served as before
(keep-alive, a slow app). An answer's head goes out in one write with its body; a streamed answer's head
and a `100 Continue` are not held back."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn

from http1 import server as bounded
from http1.server import BoundedHttp

MAX_HEAD = 4096
TIMEOUT_S = 0.5
WAIT_S = 30.0  # how long a test waits for an answer it expects (never asserted as a duration)

CALLS: list[str] = []
STREAM: dict[str, asyncio.Event] = {}  # "go": the streamed answer's body waits for it (made by its test)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    CALLS.append(scope["path"])
    if scope["path"] == "/stream":  # its head now, its body once the test has seen the head
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await STREAM["go"].wait()
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(TIMEOUT_S * 3)  # the app's own time is not the client's
    data = json.dumps({"path": scope["path"], "bytes": len(body)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("B3OS_HTTP_MAX_HEAD_BYTES", str(MAX_HEAD))
    monkeypatch.setenv("B3OS_HTTP_HEAD_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch.setenv("B3OS_HTTP_BODY_TIMEOUT_S", str(TIMEOUT_S))
    bounded.limits.cache_clear()
    yield
    bounded.limits.cache_clear()


@pytest.fixture
async def port(limits: None) -> AsyncIterator[int]:
    CALLS.clear()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=BoundedHttp, log_level="error", lifespan="off"
    )
    config.timeout_keep_alive = 1
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    await task


@contextlib.asynccontextmanager
async def connection(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    """One answer: its status and its JSON body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), WAIT_S)
    return int(lines[0].split()[1]), json.loads(body)


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (with nothing more to read)."""
    with contextlib.suppress(ConnectionResetError):
        return await asyncio.wait_for(reader.read(), WAIT_S) == b""
    return True


def request(path: str = "/", *, headers: str = "", body: bytes = b"") -> bytes:
    return f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n{headers}\r\n".encode() + body


async def test_a_head_past_the_limit_is_refused_431_and_the_connection_closed(port: int) -> None:
    # sent in pieces, the head is refused once what came passes the limit: the rest is never read
    async with connection(port) as (reader, writer):
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n")
        for _ in range(10):
            writer.write(b"x-filler: " + b"a" * 1000 + b"\r\n")
            await writer.drain()
        status, body = await answer(reader)
        assert status == 431
        assert body == {
            "error": {
                "code": "headers_too_large",
                "message": (
                    "the request line and headers are longer than 4,096 bytes, the most this server reads"
                ),
            }
        }
        assert await closed(reader)
    # sent whole in one write, and as many small headers: the same
    for headers in ("x-big: " + "a" * MAX_HEAD + "\r\n", "".join(f"x-{i}: 1\r\n" for i in range(700))):
        async with connection(port) as (reader, writer):
            writer.write(request(headers=headers))
            assert (await answer(reader))[0] == 431
            assert await closed(reader)
    assert CALLS == []  # the app never saw them


async def test_a_head_within_the_limit_is_served_and_the_connection_kept(port: int) -> None:
    async with connection(port) as (reader, writer):
        writer.write(request("/one", headers="x-big: " + "a" * (MAX_HEAD - 200) + "\r\n", body=b"12345"))
        assert await answer(reader) == (200, {"path": "/one", "bytes": 5})
        writer.write(request("/two"))  # the same connection, kept alive
        assert await answer(reader) == (200, {"path": "/two", "bytes": 0})
        # the answer's head is not the request's: many requests on one connection each get the whole limit
        for _ in range(3):
            writer.write(request("/again", headers="x-big: " + "a" * (MAX_HEAD - 200) + "\r\n"))
            assert (await answer(reader))[0] == 200
    assert CALLS == ["/one", "/two", "/again", "/again", "/again"]


async def test_a_head_that_takes_too_long_is_answered_408_and_the_connection_closed(port: int) -> None:
    async with connection(port) as (reader, writer):
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n")  # and the rest never comes
        status, body = await answer(reader)
        assert status == 408
        assert body == {
            "error": {
                "code": "request_timeout",
                "message": f"the request's line and headers did not arrive within {TIMEOUT_S:g} s",
            }
        }
        assert await closed(reader)
    # a byte now and then does not keep it open
    async with connection(port) as (reader, writer):
        writer.write(b"G")

        async def trickle() -> None:
            for byte in b"ET / HTTP/1.1\r\nhost: x\r\nx-slow: " + b"a" * 100:
                await asyncio.sleep(TIMEOUT_S / 5)
                with contextlib.suppress(ConnectionError):
                    writer.write(bytes([byte]))

        dripping = asyncio.create_task(trickle())
        try:
            assert (await answer(reader))[0] == 408
        finally:
            dripping.cancel()
    assert CALLS == []


async def test_a_body_that_takes_too_long_is_answered_408(port: int) -> None:
    async with connection(port) as (reader, writer):
        writer.write(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n" + b"a" * 10)
        status, body = await answer(reader)
        assert status == 408
        assert body["error"]["message"] == f"the request's body did not arrive within {TIMEOUT_S:g} s"
        assert await closed(reader)
    assert CALLS == []


async def test_a_connection_that_says_nothing_is_closed_without_an_answer(port: int) -> None:
    async with connection(port) as (reader, _):
        assert await closed(reader)


async def test_an_idle_kept_connection_is_closed_and_a_slow_app_still_answers(port: int) -> None:
    async with connection(port) as (reader, writer):
        writer.write(request("/slow"))  # the app takes longer than the client may take to send
        assert await answer(reader) == (200, {"path": "/slow", "bytes": 0})
        assert await closed(reader)  # then idle past uvicorn's keep-alive (1 s here): closed, no answer


async def test_an_answer_goes_out_in_one_write_with_its_head(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn writes the head and the body apart: two TCP segments, the client woken twice
    writes: list[bytes] = []
    transport = asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
    real_write = transport.write

    def write(self: Any, data: bytes) -> None:
        writes.append(bytes(data))
        real_write(self, data)

    monkeypatch.setattr(transport, "write", write)
    async with connection(port) as (reader, writer):
        for path in ("/one", "/two"):
            writer.write(request(path, body=b"12"))
            assert await answer(reader) == (200, {"path": path, "bytes": 2})
    answers = [w for w in writes if w.startswith(b"HTTP/1.1 ")]
    assert len(answers) == 2
    assert all(w.endswith(b'"bytes": 2}') for w in answers)  # head and body in each one write
    assert not [w for w in writes if w.startswith(b'{"path"')]  # no body written apart


async def test_a_streamed_answer_shows_its_head_before_its_body_is_ready(port: int) -> None:
    STREAM["go"] = asyncio.Event()
    async with connection(port) as (reader, writer):
        writer.write(request("/stream"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)  # the body is not sent yet
        assert head.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in head
        STREAM["go"].set()
        assert await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), WAIT_S) == b"4\r\nlate\r\n0\r\n\r\n"


async def test_a_client_that_expects_100_continue_gets_it_before_it_sends_the_body(port: int) -> None:
    async with connection(port) as (reader, writer):
        writer.write(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"abc")
        assert await answer(reader) == (200, {"path": "/upload", "bytes": 3})


async def test_a_bad_setting_is_named() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("B3OS_HTTP_MAX_HEAD_BYTES", "12")
        bounded.limits.cache_clear()
        with pytest.raises(ValueError, match="max_head_bytes"):
            bounded.limits()
    bounded.limits.cache_clear()
