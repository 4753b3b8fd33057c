"""`HEAD` on every route that answers `GET`, as ASGI middleware: `HeadAsGet`.

FastAPI's routes take only the methods they declare, so a `HEAD` was answered 405 while the `Allow`
header (api/errors.py) listed it, and load balancers that probe with `HEAD` failed. RFC 9110 makes
`HEAD` the same request as `GET` without the body: the middleware hands the app the request as `GET`
(its status, headers and `Content-Length` are the ones `GET` gets: 200, 401, 404, 405 alike) and sends
no byte of the body. Declaring `HEAD` on each route instead would double every operation of
`/openapi.json`. A path with a `HEAD` of its own (a blob's, which says whether your organization has
it) and the static assets keep answering it themselves.

A streamed `GET` (a blob download) is still read to its end, its bytes dropped: no answer is cut short.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """Answer `HEAD` as the app answers `GET`, without the body, where no route takes `HEAD` itself."""

    def __init__(self, app: ASGIApp, *, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" or self._own_head(scope):
            await self.app(scope, receive, send)
            return
        ended = False

        async def without_body(message: Message) -> None:
            nonlocal ended
            if message["type"] != "http.response.body":
                await send(message)
            elif not ended:
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, without_body)

    def _own_head(self, scope: Scope) -> bool:
        """Whether a route answers `HEAD` at this path itself (matching a path reads nothing)."""
        return any(route.matches(scope)[0] is Match.FULL for route in self.routes)
