"""The one reader of JSON request bodies: `parse_json`, and `JsonGuard`, which applies it to every route.

Every request body is read here before any route sees it, and must be I-JSON (RFC 7493), which is
what the rest of the system can hold: RFC 8785 canonical JSON (the hash of an idempotent request, a
pack's content hash), Temporal payloads, the node's and the egress proxy's JSON, and clients in any
language. So a body is refused with `400 invalid_request`, `field` naming the place (`input.text`,
`inputs.items.3`, or `body`), when

- it nests arrays and objects deeper than `MAX_DEPTH` (64) levels;
- a string or a member name is not Unicode that UTF-8 can carry (a lone surrogate such as `"\\udaac"`);
- an integer is outside +-(2^53 - 1) (a number with 5,000 digits included), or a number is NaN,
  Infinity or overflows a double (`1e400`).

A body that is not JSON at all passes the guard untouched: each route answers it in its own words (the
REST routes `400 invalid_request` with `field: "body"`, MCP a JSON-RPC parse error). The guard keeps the
parsed value in the ASGI scope, so `request_json` gives it to a route without parsing the body twice.
"""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from api.bodylimit import replaying
from api.errors import InvalidRequest, error_response
from engine.payloads import is_unicode

MAX_DEPTH = 64
PARSE_INLINE_BYTES = 64 << 10
"""A larger body is parsed and walked in a worker thread: a 600 KB run input or a list of 10,000 items
takes 2-20 ms of CPU, which on the event loop would hold every other request for that long."""
MAX_SAFE_INTEGER = 2**53 - 1
SCOPE_KEY = "b3os.json_body"
_FIELD_CHARS = 256
_KEY_CHARS = 64


class BodyNotJson(InvalidRequest):
    """400 invalid_request: the body is not JSON at all (`field: "body"`)."""


class _Refused:
    """A number literal the guard refuses, kept as parsed so the walk can name its field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _int(text: str) -> int | _Refused:
    # More than 16 digits is beyond 2^53 - 1 whatever they are: no int() of 5,000 digits is attempted.
    if len(text.lstrip("-")) > 16:
        return _Refused(text)
    value = int(text)
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _Refused(text)


def _field(path: list[str | int]) -> str:
    if not path:
        return "body"
    parts = []
    for part in path:
        # a lone surrogate (which no UTF-8 carries) as its escape, `\\udaac`; every other character as it is
        text = str(part).encode("utf-8", "backslashreplace").decode("utf-8")
        parts.append(text if len(text) <= _KEY_CHARS else text[:_KEY_CHARS] + "...")
    field = ".".join(parts)
    return field if len(field) <= _FIELD_CHARS else field[:_FIELD_CHARS] + "..."


def _scalar_problem(value: Any, path: list[str | int]) -> InvalidRequest | None:
    if isinstance(value, str):
        if is_unicode(value):
            return None
        field = _field(path)
        return InvalidRequest(
            f"The field {field} holds text that is not valid Unicode (a lone surrogate such as \\udaac); "
            "send text that UTF-8 can carry.",
            field=field,
        )
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        field = _field(path)
        return InvalidRequest(
            f"The field {field} holds a number JSON cannot carry (beyond +-1.8e308).", field=field
        )
    if isinstance(value, _Refused):
        field = _field(path)
        if value.text.lstrip("-").isdigit():
            sentence = (
                f"The field {field} holds an integer outside +-{MAX_SAFE_INTEGER} (2^53 - 1), the range a "
                "JSON number keeps exactly (RFC 7493); send a larger one as a string."
            )
        else:
            sentence = f"The field {field} holds {value.text}, which is not a JSON number."
        return InvalidRequest(sentence, field=field)
    return None


def check_value(value: Any) -> None:
    """Refuse a parsed JSON value that breaks the limits of this module.

    Raises:
        InvalidRequest: naming the first field at fault.
    """
    problem = _scalar_problem(value, [])
    if problem is not None:
        raise problem
    stack: list[tuple[dict[str, Any] | list[Any], list[str | int]]] = []
    if isinstance(value, dict | list):
        stack.append((value, []))
    while stack:
        container, path = stack.pop()
        if len(path) >= MAX_DEPTH:
            field = _field(path)
            raise InvalidRequest(
                f"The request body nests arrays and objects deeper than {MAX_DEPTH} levels (at {field}).",
                field=field,
            )
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, child in items:
            if isinstance(key, str) and not is_unicode(key):
                field = _field([*path, key])
                raise InvalidRequest(
                    f"A member name at {field} is not valid Unicode (a lone surrogate such as \\udaac); send "
                    "text that UTF-8 can carry.",
                    field=field,
                )
            if isinstance(child, dict | list):
                stack.append((child, [*path, key]))
            elif isinstance(child, str | float | _Refused):
                problem = _scalar_problem(child, [*path, key])
                if problem is not None:
                    raise problem


def _plainly_within(value: Any) -> bool:
    """Whether a value parsed with Python's own rules is within the limits (no field is named: a value
    that is not is parsed again the careful way, which says where)."""
    stack: list[tuple[Any, int]] = [([value], -1)]  # the value in a list: a scalar is checked alike
    while stack:
        container, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return False
        if type(container) is dict:
            if not all(is_unicode(key) for key in container):
                return False
            items: Any = container.values()
        else:
            items = container
        for item in items:
            kind = type(item)
            if kind is str:
                if not is_unicode(item):
                    return False
            elif kind is int:
                if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                    return False
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif kind is dict or kind is list:
                stack.append((item, depth + 1))
    return True


def parse_json(raw: bytes) -> Any:
    """Parse a request body and check it against the limits of this module.

    Raises:
        BodyNotJson: the bytes are not JSON.
        InvalidRequest: the JSON breaks a limit (too deep, text that is not Unicode, a number out of range).
    """
    # The common case first: Python's parser as it is, and one walk. A body that breaks a limit, or that
    # Python's parser refuses, is parsed again with each integer and constant seen (_int, _Refused),
    # which is ~2x slower but names the field at fault.
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        pass
    else:
        if _plainly_within(value):
            return value
    try:
        value = json.loads(raw, parse_int=_int, parse_constant=_Refused)
    except RecursionError:
        raise InvalidRequest(
            f"The request body nests arrays and objects deeper than {MAX_DEPTH} levels.", field="body"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyNotJson(f"The request body is not valid JSON ({exc}).", field="body") from None
    check_value(value)
    return value


def request_json(request: Request, raw: bytes) -> Any:
    """The JSON of a request body: the value `JsonGuard` parsed, or `raw` parsed now (`parse_json`)."""
    if SCOPE_KEY in request.scope:
        return request.scope[SCOPE_KEY]
    return parse_json(raw)


class JsonGuard:
    """An ASGI middleware: refuse a request whose JSON body breaks the limits, before any route reads it.

    Paths under `exempt_prefixes` (blob uploads, raw bytes) pass through untouched.
    """

    def __init__(self, app: ASGIApp, *, exempt_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was read: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body.strip():
            try:
                if len(body) > PARSE_INLINE_BYTES:  # its walk would hold every other request meanwhile
                    scope[SCOPE_KEY] = await anyio.to_thread.run_sync(parse_json, body)
                else:
                    scope[SCOPE_KEY] = parse_json(body)
            except BodyNotJson:
                pass  # the route answers a body that is not JSON in its own words
            except InvalidRequest as err:
                await error_response(err)(scope, receive, send)
                return
        await self.app(scope, replaying(body, receive), send)
