"""The lean HTTP/1.1 client of the api's calls to nodes and the worker's calls to the api (http1),
against real sockets on loopback: servers that answer well, keep or close their connections, answer in
chunks, stall, break off, or say no HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from http1 import client as _http1
from http1.client import ConnectFailed, Http1, TimedOut, TransportFailed

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A loopback server running `handler` for each connection; counts the connections it took."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/node/calls"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.handler(reader, writer)
        writer.close()


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head and body (by its Content-Length), or None at the end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


def answer(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


Serve = Callable[[Handler], Awaitable[Server]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[Server] = []

    async def start(handler: Handler) -> Server:
        server = Server(handler)
        server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


@pytest.fixture
async def client() -> AsyncIterator[Http1]:
    client = Http1()
    yield client
    await client.aclose()


async def echo_json(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request on the connection with a JSON body and a header, keeping it open."""
    while (request := await read_request(reader)) is not None:
        body = b'{"ok":true,"got":' + str(len(request)).encode() + b"}"
        writer.write(answer(body, extra="X-B3os-Answer-Proof: p1\r\nRetry-After: 3\r\n"))
        await writer.drain()


async def post(client: Http1, url: str, *, timeout_s: float = 5.0) -> _http1.Response:
    return await client.post(
        url,
        content=b'{"a":1}',
        headers={"Content-Type": "application/json"},
        timeout_s=timeout_s,
        connect_s=2.0,
    )


async def test_answers_are_read_whole_and_one_connection_carries_the_requests(
    serve: Serve, client: Http1
) -> None:
    server = await serve(echo_json)
    for _ in range(3):
        response = await post(client, server.url)
        assert response.status_code == 200 and response.content.startswith(b'{"ok":true')
        assert response.headers.get("x-b3os-answer-proof") == response.headers["X-B3os-Answer-Proof"] == "p1"
        assert response.headers.get("Retry-After") == "3"
    assert server.connections == 1


async def test_the_request_carries_its_path_host_length_headers_and_body(serve: Serve, client: Http1) -> None:
    seen: list[bytes] = []

    async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        assert request is not None
        seen.append(request)
        writer.write(answer(b"{}"))
        await writer.drain()

    server = await serve(keep)
    await client.post(server.url, content=b"xyz", headers={"X-B3os-Node": "node-a"}, timeout_s=5, connect_s=1)
    head, body = seen[0].split(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/node/calls HTTP/1.1"
    port = server.url.split(":")[2].split("/")[0]
    assert {"Host: 127.0.0.1:" + port, "Content-Length: 3", "X-B3os-Node: node-a"} <= set(lines)
    assert body == b"xyz"
    # a relative path goes under the client's base URL, its own path included (an api behind a prefix)
    based = Http1(base_url=server.url.rsplit("/v1/", 1)[0] + "/b3os/")
    await based.post("/v1/actions/call?x=1", content=b"", headers={}, timeout_s=5, connect_s=1)
    await based.aclose()
    assert seen[1].split(b"\r\n")[0] == b"POST /b3os/v1/actions/call?x=1 HTTP/1.1"


async def test_a_chunked_answer_is_read_whole(serve: Serve, client: Http1) -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b'{"ok":', b"true}"):
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await serve(chunked)
    response = await post(client, server.url)
    assert response.content == b'{"ok":true}'


async def test_a_connection_the_server_closes_is_not_reused(serve: Serve, client: Http1) -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}", extra="Connection: close\r\n"))
        await writer.drain()

    async def then_idle_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}"))
        await writer.drain()  # keeps it alive by its headers, then closes it while idle

    for handler in (once, then_idle_close):
        server = await serve(handler)
        await post(client, server.url)
        await asyncio.sleep(0.05)
        assert (await post(client, server.url)).status_code == 200
        assert server.connections == 2


async def test_an_idle_connection_is_dropped_before_the_node_would_close_it(
    serve: Serve, client: Http1, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await serve(echo_json)
    await post(client, server.url)
    monkeypatch.setattr(_http1, "IDLE_S", 0.0)
    await post(client, server.url)
    assert server.connections == 2


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/node/calls"


async def test_a_refused_connection_is_a_connect_failure(client: Http1) -> None:
    with pytest.raises(ConnectFailed):
        await post(client, refused_url())


async def test_a_node_that_does_not_answer_in_time_is_a_timeout_and_its_connection_is_dropped(
    serve: Serve, client: Http1
) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{")  # and nothing more
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = await serve(stall)
    with pytest.raises(TimedOut):
        await post(client, server.url, timeout_s=0.2)
    assert client._idle.get(("http", "127.0.0.1", int(server.url.split(":")[2].split("/")[0]))) in (None, [])


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "closed before the answer was complete"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP"),
    ],
)
async def test_a_broken_or_foreign_answer_is_a_transport_failure(
    serve: Serve, client: Http1, reply: bytes, says: str
) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    server = await serve(broken)
    with pytest.raises(TransportFailed, match=says):
        await post(client, server.url)


async def test_an_answer_past_the_cap_is_refused_not_kept(
    serve: Serve, client: Http1, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http1, "MAX_ANSWER_BYTES", 1000)

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"x" * 5000))
        await writer.drain()

    server = await serve(big)
    with pytest.raises(TransportFailed, match="larger than 1000 bytes"):
        await post(client, server.url)
