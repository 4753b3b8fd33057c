"""The node's proof check as a plain ASGI middleware: a request without the api's proof for this node is
answered 401, and every answer to a proven one carries the node's proof of it (`node.credential`).

Plain ASGI rather than Starlette's `@app.middleware("http")`: that one runs the route in a task of its own
behind memory streams and re-streams the answer; here the request body is read once and handed on, and
the answer is held only to be proven (the node's answers are small JSON).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from node.credential import PROOF_HEADER, ProofChecker


def refusal(message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A 401 `unauthorized` answer: status, headers, body."""
    body = json.dumps({"error": {"code": "unauthorized", "message": message}}).encode()
    return 401, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())], body


class Proven:
    """Refuse a request without the api's proof; prove the answer to one with it."""

    def __init__(self, app: ASGIApp, *, checker: ProofChecker | None) -> None:
        self.app = app
        self.checker = checker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        checker = self.checker
        if checker is None:
            await _answer(send, *refusal("This node has no credential: set B3OS_NODE_CREDENTIAL."))
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        headers = Headers(scope=scope)
        refused = checker.check(method=scope["method"], path=scope["path"], headers=headers, body=body)
        if refused is not None:
            await _answer(send, *refusal(refused))
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the client's disconnect

        start: Message = {}
        parts: list[bytes] = []

        async def hold(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                content = b"".join(parts)
                proof = checker.answer_headers(
                    proof=headers[PROOF_HEADER], status=start["status"], body=content
                )
                out = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                out.append((b"content-length", str(len(content)).encode()))
                out.extend((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in proof.items())
                await _answer(send, start["status"], out, content)
                return
            await send(message)

        await self.app(scope, replay, hold)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    message: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(message)
    await send({"type": "http.response.body", "body": body, "more_body": False})
