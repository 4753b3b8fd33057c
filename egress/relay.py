"""`POST /v1/egress/relay`: a js call's `fetch`, relayed by its node with the call's grant.

Body: `{"grant", "method", "url", "headers", "body", "timeout_ms"?, "max_body_bytes"?}`. No bearer: the
grant (`egress.grants`) is the authority, and it decides the egress list and the credentials; the rest is
an ordinary fetch (`egress.fetch.Fetcher`), with at most 5 redirects, 1 MiB of body and no more time than
the grant has left. A grant that does not open answers 401 `{"error": {"code": "unauthorized"}}`; a body
that is not a relay request 400 `invalid_request`; else 200 with the fetch's answer.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from egress.fetch import Fetcher
from egress.grants import GrantError, open_grant
from egress.models import MIB, Base64Body, FetchRequest, HeaderName, HeaderValue

MAX_RELAY_BYTES = 12 * MIB
MAX_REDIRECTS = 5


class RelayRequest(BaseModel):
    """One request of a js call, as its node relays it."""

    model_config = ConfigDict(extra="forbid")

    grant: str = Field(min_length=1, max_length=256 * 1024)
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    url: str = Field(min_length=1, max_length=16384)
    headers: list[tuple[HeaderName, HeaderValue]] = Field(default_factory=list, max_length=256)
    body: Base64Body | None = None
    timeout_ms: int = Field(default=30_000, ge=1, le=60_000)
    max_body_bytes: int = Field(default=MIB, ge=0, le=MIB)


def _problem(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def relay_answer(request: Request, fetcher: Fetcher, token: str) -> tuple[JSONResponse, str]:
    """The answer to one relayed request, and its outcome for the metrics."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_RELAY_BYTES:
            return _problem(400, "invalid_request", f"the request is larger than {MAX_RELAY_BYTES} bytes"), (
                "invalid_request"
            )
    try:
        data: Any = json.loads(raw)
        relayed = RelayRequest.model_validate(data)
    except (ValueError, UnicodeDecodeError, ValidationError) as exc:
        why = "the request body is not JSON"
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            why = f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
        return _problem(400, "invalid_request", why), "invalid_request"
    try:
        grant = open_grant(token, relayed.grant)
    except GrantError as exc:
        return _problem(401, "unauthorized", str(exc)), "unauthorized"
    left_ms = int((grant.expires_at - time.time()) * 1000)
    fetch_request = FetchRequest(
        method=relayed.method,
        url=relayed.url,
        headers=relayed.headers,
        body=relayed.body,
        egress=grant.egress,
        credentials=grant.credentials,
        timeout_ms=max(1, min(relayed.timeout_ms, left_ms)),
        max_body_bytes=relayed.max_body_bytes,
        max_redirects=MAX_REDIRECTS,
    )
    answer = await fetcher.fetch(fetch_request)
    error = answer.get("error")
    return JSONResponse(answer), str(error.get("reason")) if isinstance(error, dict) else "ok"
