"""The bounded HTTP protocol of a server the CLI runs (`b3os node run`, `b3os egress run`), its settings
checked before the server starts."""

from __future__ import annotations

import sys

from pydantic import ValidationError

from http1.server import BoundedHttp, limits


def bounded_http(command: str) -> type[BoundedHttp] | None:
    """The protocol to give uvicorn, or None once a bad `B3OS_HTTP_...` setting was printed."""
    try:
        limits()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = f"B3OS_HTTP_{str(first['loc'][0]).upper()}"
        print(f"{command}: bad setting {name}: {first['msg']}", file=sys.stderr)
        return None
    return BoundedHttp
