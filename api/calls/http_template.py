"""The HTTP runtime's pure part: a declarative action's request template evaluated, its response read.

Request (the seed's steps 2 and 3), with `input` (defaults filled in) and `connections.<key>.<param>`
(the organization's non-secret params) in scope:

- `url`: the scheme and host are the manifest's own (the publish checks refuse a template there); each
  `${{ }}` after the host is spliced percent-encoded with nothing left safe (`/`, `?`, `#`, `%`, `&`,
  `=`, unicode as UTF-8), so no input can add a path segment, a query or a fragment; a path segment
  that comes out as `.` or `..` is refused (an input `%2E%2E` is sent as `%252E%252E`, a name).
- `query`: each value a text template (a whole expression keeps its type: `null` leaves the
  parameter out, a list repeats it), appended to the URL's own query.
- `headers`: text templates; a value with a line break or another control character is refused.
- `body`: any JSON value, templates inside keep their type when they are the whole value; sent as
  `application/json` unless the template sets `Content-Type`.
- the final URL must be `https` and its host must match the pack's `egress` (checked here, before any
  connection; the proxy checks again, and on every redirect).

Response (step 5), with `response` = `{"status", "headers" (lowercase names), "body"}` in scope too
(`body` is the parsed JSON, or the text when the body is not JSON): `response.success` (default a
2xx status), `response.map` (default the body, which must then be JSON), and on failure the first
`response.errors[]` entry whose `when` holds names the pack's error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from api.calls.errors import ActionFailed, CallInvalid
from api.errors import CallError
from engine import expressions
from engine.expressions import Expr, ExpressionError
from packs.manifest import HttpErrorRule, HttpRequest, HttpResponse, host_allowed

_CONTROL = {chr(c) for c in range(32)} | {"\x7f"}


@dataclass(frozen=True)
class RenderedRequest:
    """A request ready for the egress proxy."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes | None = None

    @property
    def host(self) -> str:
        """The URL's host, lowercase."""
        return (urlsplit(self.url).hostname or "").lower()


@dataclass(frozen=True)
class ReadResponse:
    """A response read: the output when it succeeded, else the pack's error (when one matched)."""

    ok: bool
    output: Any = None
    pack_error: dict[str, Any] | None = None
    retryable: bool = False
    scope: dict[str, Any] = field(default_factory=dict)


def _template_failed(where: str, exc: ExpressionError) -> ActionFailed:
    return ActionFailed(
        f"the action's request template failed at {where}: {exc}; nothing was sent or billed",
        reason="template",
        details={"field": where},
    )


def _splice_url(template: str, scope: dict[str, Any]) -> str:
    parts = urlsplit(template)
    head_len = len(f"{parts.scheme}://{parts.netloc}")
    head, rest = template[:head_len], template[head_len:]
    if expressions.OPEN in head:
        raise ActionFailed(
            "the action's url puts an expression in its host; nothing was sent", reason="template"
        )
    out: list[str] = []
    try:
        for part in expressions.split_template(rest):
            if isinstance(part, Expr):
                text = expressions.to_text(expressions.evaluate_expression(part.source, scope))
                out.append(quote(text, safe=""))
            else:
                out.append(part)
    except ExpressionError as exc:
        raise _template_failed("impl.request.url", exc) from None
    path = "".join(out)
    for segment in urlsplit(head + path).path.split("/"):
        if segment in (".", ".."):
            raise CallInvalid(
                f"the input makes the URL path segment {segment!r}, which is refused: a value spliced "
                "into the path may not be '.' or '..'",
                details={"field": "input"},
            )
    return head + path


def _text(value: Any, where: str) -> str:
    text = expressions.to_text(value)
    if any(ch in _CONTROL for ch in text):
        raise CallInvalid(
            f"{where} would hold a line break or another control character, which is refused",
            details={"field": "input"},
        )
    return text


def render_request(request: HttpRequest, scope: dict[str, Any], egress: list[str]) -> RenderedRequest:
    """Evaluate the request template.

    Raises:
        ActionFailed: a template failed (`template`) or the URL is not https to an egress host
            (`egress_refused`); nothing was sent.
        CallInvalid: the input would add a `.`/`..` segment or a control character to a header.
    """
    url = _splice_url(request.url, scope)
    query: list[tuple[str, str]] = []
    for name, template in request.query.items():
        try:
            value = expressions.evaluate(template, scope)
        except ExpressionError as exc:
            raise _template_failed(f"impl.request.query.{name}", exc) from None
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                query.append((name, _text(item, f"query parameter {name}")))
    if query:
        url += ("&" if urlsplit(url).query else "?") + urlencode(query, quote_via=quote)
    headers: list[tuple[str, str]] = []
    for name, template in request.headers.items():
        try:
            value = expressions.evaluate(template, scope)
        except ExpressionError as exc:
            raise _template_failed(f"impl.request.headers.{name}", exc) from None
        headers.append((name, _text(value, f"header {name}")))
    body: bytes | None = None
    if request.body is not None:
        try:
            value = expressions.evaluate(request.body, scope)
        except ExpressionError as exc:
            raise _template_failed("impl.request.body", exc) from None
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        if not any(n.lower() == "content-type" for n, _ in headers):
            headers.append(("Content-Type", "application/json"))
    rendered = RenderedRequest(method=request.method, url=url, headers=headers, body=body)
    if urlsplit(url).scheme != "https" or not host_allowed(rendered.host, egress):
        raise ActionFailed(
            f"the action's request goes to {rendered.host or url!r}, which is not https to a host of the "
            f"pack's egress ({', '.join(egress) or 'none'}); nothing was sent",
            reason="egress_refused",
        )
    return rendered


def response_scope(status: int, headers: list[list[str]], body: bytes) -> dict[str, Any]:
    """`response` as templates see it: status, lowercase headers, the body parsed as JSON or as text."""
    parsed: Any
    try:
        parsed = json.loads(body) if body else None
        is_json = True
    except (ValueError, UnicodeDecodeError):
        parsed, is_json = body.decode("utf-8", errors="replace"), False
    names: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        names[key] = f"{names[key]}, {value}" if key in names else value
    return {"status": status, "headers": names, "body": parsed, "is_json": is_json}


def read_response(rule: HttpResponse, scope: dict[str, Any], response: dict[str, Any]) -> ReadResponse:
    """Decide success, map the output, or find the pack's error.

    Raises:
        ActionFailed: `success` or `map` failed (`map`), or the body is not JSON where it must be
            (`not_json`).
    """
    is_json = response.pop("is_json", True)
    full = {**scope, "response": response}
    try:
        if rule.success is not None:
            ok = expressions.evaluate_condition(rule.success, full)
        else:
            ok = 200 <= int(response["status"]) < 300
    except ExpressionError as exc:
        raise ActionFailed(f"the action's response.success failed: {exc}", reason="map") from None
    if not ok:
        return _failed(rule.errors, full)
    if not rule.has_map:
        if not is_json:
            raise ActionFailed(
                f"the upstream answered HTTP {response['status']} with a body that is not JSON, and the "
                "action has no response.map",
                reason="not_json",
            )
        return ReadResponse(ok=True, output=response["body"], scope=full)
    try:
        return ReadResponse(ok=True, output=expressions.evaluate(rule.map, full), scope=full)
    except ExpressionError as exc:
        raise ActionFailed(f"the action's response.map failed: {exc}", reason="map") from None


def _failed(rules: list[HttpErrorRule], full: dict[str, Any]) -> ReadResponse:
    for rule in rules:
        try:
            if not expressions.evaluate_condition(rule.when, full):
                continue
            message = expressions.to_text(expressions.evaluate(rule.message, full)) if rule.message else None
        except (ExpressionError, CallError):
            continue  # an entry that cannot be evaluated does not match
        pack_error = {"code": rule.code, "message": (message or rule.code)[:1000]}
        return ReadResponse(ok=False, pack_error=pack_error, retryable=rule.retryable, scope=full)
    return ReadResponse(ok=False, scope=full)
