"""Every server of the stack (the api, the node, the egress proxy) runs the bounded HTTP protocol
(http1/server.py; its every rule is tested in tests/http1/test_server.py): 64 MB of headers are refused
431 after the first 16 KiB, the connection closed, and the process goes on serving."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import loopback
from sqlmodel import Session, select
from workers import PATIENCE_S

from api.models import Node

from .calltest import call
from .stack import ECHO, Stack

MESSAGE = "the request line and headers are longer than 16,384 bytes, the most this server reads"


def _huge_head(url: str) -> tuple[bytes, int]:
    """Send a request whose headers would be 64 MB; what came back and how many bytes were sent."""
    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname, parts.port), timeout=PATIENCE_S) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-huge: ")
        try:
            for _ in range(1024):
                sock.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):  # the server closed: what it said was read below
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer, sent


def test_every_server_of_the_stack_refuses_a_huge_head_and_goes_on(stack: Stack) -> None:
    with Session(stack.engine) as session:
        node_url = session.exec(select(Node.url).where(Node.node_id == "node-a")).one()
    assert stack.egress is not None
    for name, url in (("api", stack.url), ("node", node_url), ("egress", stack.egress.url)):
        answer, sent = _huge_head(url)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 "), (name, answer[:300])
        assert json.loads(body) == {"error": {"code": "headers_too_large", "message": MESSAGE}}, name
        assert sent < 64 * 1024 * 1024, name  # the rest was never read
    # and each goes on serving
    assert loopback.get(f"{stack.url}/healthz").status_code == 200
    answer = call(stack, stack.org(), f"{ECHO}/echo@1", {"text": "still here"})
    assert answer.status_code == 200 and answer.json()["output"] == {"text": "still here"}
