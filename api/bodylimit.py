"""An ASGI middleware that refuses request bodies over a size limit with 413 payload_too_large.

It reads at most `max_bytes` + 1 before refusing, whether or not the client sent Content-Length,
then replays the body to the app. Paths under `exempt_prefixes` (blob uploads, which stream and
enforce their own limit) pass through untouched.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import PayloadTooLarge, error_response


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then whatever comes after it."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class BodyLimit:
    """Refuse bodies larger than `max_bytes` (except under `exempt_prefixes`)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, exempt_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(
            f"The request body is larger than the limit of {self.max_bytes} bytes.",
            limit_bytes=self.max_bytes,
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await error_response(too_large)(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await error_response(too_large)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        await self.app(scope, replaying(body, receive), send)
