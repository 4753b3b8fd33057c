"""Publish checks of triggers, the events a pack says start routines: 36 to 40 (keys: check 7; a tool pack
has none: check 16).

A webhook trigger says how a delivery is verified (an HMAC-SHA256 of the body with the subscription's
secret in a named header, optionally with a signed timestamp header and a tolerance), how to read the
events of one delivery and each event's id. A poll trigger is declarative like an http action: a request
template (with `input`, `connections` and `cursor` in scope), how to read the items of the answer, each
item's id (`dedupe`), the next cursor and, optionally, the event an item makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from packs.checks_util import (
    HEADER_NAME_RE,
    RUNTIME_HEADERS,
    Report,
    check_text,
    connections_by_key,
    egress_hosts,
    is_tool_pack,
    missing_or,
    schema_error,
)
from packs.manifest import host_allowed
from packs.templates import MARK, OPEN, TemplateError, cel_problem, is_single_expression, parts, skeleton
from packs.triggers import POLL_MAX_S, POLL_MIN_S, TOLERANCE_MAX_S, TRIGGER_KINDS

TRIGGER_FIELDS = (
    "key",
    "title",
    "description",
    "kind",
    "eventSchema",
    "inputSchema",
    "connections",
    "webhook",
    "poll",
)
WEBHOOK_FIELDS = ("verify", "events", "id")
VERIFY_FIELDS = ("kind", "header", "prefix", "timestamp")
POLL_FIELDS = ("everyS", "request", "items", "dedupe", "cursor", "event")
POLL_REQUEST_FIELDS = ("method", "url", "query", "headers", "body")
ONE_EXPRESSION = "use one ${{ }} expression"


def triggers_of(m: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each trigger object with its field path ("triggers[0]"), for a declarative pack."""
    triggers = m.get("triggers")
    if is_tool_pack(m) or not isinstance(triggers, list):
        return  # check 16 refuses a tool pack's triggers, check 7 a triggers that is no list
    for i, t in enumerate(triggers):
        if isinstance(t, Mapping):
            yield f"triggers[{i}]", t


def _unknown(
    r: Report, n: int, at: str, value: Mapping[str, Any], fields: tuple[str, ...], what: str
) -> None:
    for key in value:
        if key not in fields:
            r.add(
                n,
                f"{at}.{key}",
                value[key],
                f"{what} has only the fields " + ", ".join(fields),
                name_only=True,
            )


def check_trigger_fields(m: Mapping[str, Any], r: Report) -> None:
    for p, t in triggers_of(m):
        _unknown(r, 36, p, t, TRIGGER_FIELDS, "a trigger")
        check_text(r, 36, t, "title", p + ".", 100, True)
        check_text(r, 36, t, "description", p + ".", 2000, False)
        kind = t.get("kind")
        if kind not in TRIGGER_KINDS:
            r.add(36, f"{p}.kind", kind, missing_or("kind" in t, 'use "webhook" or "poll"'))
            continue
        other = "poll" if kind == "webhook" else "webhook"
        if other in t:
            r.add(
                36,
                f"{p}.{other}",
                t[other],
                f"a {kind} trigger has no {other} section: remove it",
                name_only=True,
            )
        if not isinstance(t.get(kind), Mapping):
            r.add(
                36,
                f"{p}.{kind}",
                t.get(kind),
                missing_or(kind in t, f"a {kind} trigger describes itself in {kind}: an object"),
            )


def check_trigger_schemas(m: Mapping[str, Any], r: Report) -> None:
    for p, t in triggers_of(m):
        for field in ("eventSchema", "inputSchema"):
            if field == "inputSchema" and field not in t:
                continue
            schema = t.get(field)
            if not isinstance(schema, Mapping):
                r.add(
                    37, f"{p}.{field}", schema, missing_or(field in t, 'use a JSON Schema of type "object"')
                )
                continue
            problem = schema_error(schema)
            if problem is not None:
                where, instance, why = problem
                r.add(37, f"{p}.{field}{where}", instance, why)
            elif schema.get("type") != "object":
                r.add(37, f"{p}.{field}.type", schema.get("type"), 'use "object" at the top of the schema')


def _one_expression(
    r: Report, n: int, at: str, section: Mapping[str, Any], field: str, example: str, required: bool
) -> None:
    if field not in section and not required:
        return
    if not is_single_expression(section.get(field)):
        r.add(
            n,
            f"{at}.{field}",
            section.get(field),
            missing_or(field in section, f'{ONE_EXPRESSION} such as "{example}"'),
        )


def _header(r: Report, n: int, at: str, section: Mapping[str, Any], example: str) -> None:
    name = section.get("header")
    if not isinstance(name, str) or HEADER_NAME_RE.match(name) is None:
        r.add(
            n, f"{at}.header", name, missing_or("header" in section, f'use a header name such as "{example}"')
        )


def check_webhooks(m: Mapping[str, Any], r: Report) -> None:
    for p, t in triggers_of(m):
        hook = t.get("webhook")
        if t.get("kind") != "webhook" or not isinstance(hook, Mapping):
            continue
        at = f"{p}.webhook"
        _unknown(r, 38, at, hook, WEBHOOK_FIELDS, "a webhook")
        if t.get("connections"):
            r.add(
                38,
                f"{p}.connections",
                t["connections"],
                "a webhook trigger uses no connection: b3os gives each subscription its own signing secret",
            )
        verify = hook.get("verify")
        shape = 'use {"kind": "hmac-sha256", "header": "X-Hub-Signature-256", "prefix": "sha256="}'
        if not isinstance(verify, Mapping):
            r.add(38, f"{at}.verify", verify, missing_or("verify" in hook, shape))
        else:
            v = f"{at}.verify"
            _unknown(r, 38, v, verify, VERIFY_FIELDS, "verify")
            if verify.get("kind") != "hmac-sha256":
                r.add(38, f"{v}.kind", verify.get("kind"), missing_or("kind" in verify, 'use "hmac-sha256"'))
            _header(r, 38, v, verify, "X-Hub-Signature-256")
            prefix = verify.get("prefix", "")
            if not isinstance(prefix, str) or len(prefix) > 40 or not prefix.isprintable():
                r.add(
                    38,
                    f"{v}.prefix",
                    prefix,
                    'use the text before the hex digest, such as "sha256=", or omit it',
                )
            if "timestamp" in verify:
                _check_timestamp(r, f"{v}.timestamp", verify["timestamp"])
        _one_expression(
            r, 38, at, hook, "events", "${{ body.action == 'opened' ? [body.issue] : [] }}", False
        )
        _one_expression(r, 38, at, hook, "id", "${{ headers['x-github-delivery'] }}", True)


def _check_timestamp(r: Report, at: str, ts: Any) -> None:
    if not isinstance(ts, Mapping) or not set(ts) <= {"header", "toleranceS"}:
        r.add(38, at, ts, 'use {"header": "X-Timestamp", "toleranceS": 300}')
        return
    _header(r, 38, at, ts, "X-Timestamp")
    tolerance = ts.get("toleranceS", 300)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or not 1 <= tolerance <= TOLERANCE_MAX_S:
        r.add(
            38,
            f"{at}.toleranceS",
            tolerance,
            f"use whole seconds from 1 to {TOLERANCE_MAX_S}, or omit it for 300",
        )


def check_polls(m: Mapping[str, Any], r: Report) -> None:
    egress, known = egress_hosts(m), connections_by_key(m)
    for p, t in triggers_of(m):
        poll = t.get("poll")
        if t.get("kind") != "poll" or not isinstance(poll, Mapping):
            continue
        at = f"{p}.poll"
        _unknown(r, 39, at, poll, POLL_FIELDS, "a poll")
        every = poll.get("everyS", 300)
        if isinstance(every, bool) or not isinstance(every, int) or not POLL_MIN_S <= every <= POLL_MAX_S:
            r.add(
                39,
                f"{at}.everyS",
                every,
                f"use whole seconds from {POLL_MIN_S} to {POLL_MAX_S}, or omit it for 300",
            )
        _check_poll_request(r, f"{at}.request", poll, egress)
        _one_expression(r, 39, at, poll, "items", "${{ response.body.items }}", True)
        _one_expression(r, 39, at, poll, "dedupe", "${{ item.id }}", True)
        _one_expression(r, 39, at, poll, "cursor", "${{ response.body.next }}", False)
        _check_poll_connections(r, p, t, known)


def _check_poll_request(r: Report, at: str, poll: Mapping[str, Any], egress: list[str]) -> None:
    req = poll.get("request")
    if not isinstance(req, Mapping):
        r.add(39, at, req, missing_or("request" in poll, 'use {"method": "GET", "url": "https://..."}'))
        return
    _unknown(r, 39, at, req, POLL_REQUEST_FIELDS, "a poll request")
    method = req.get("method", "GET")
    if method not in ("GET", "POST"):
        r.add(39, f"{at}.method", method, "use GET or POST")
    if "body" in req and method != "POST":
        r.add(39, f"{at}.body", req["body"], "a GET request has no body: send one with POST")
    url = req.get("url")
    try:
        split = urlsplit(skeleton(url)) if isinstance(url, str) and url.startswith("https://") else None
    except (ValueError, TemplateError):
        split = None
    if split is None or not split.netloc:
        r.add(39, f"{at}.url", url, missing_or("url" in req, "use an https:// URL"))
    elif MARK in split.netloc or OPEN in split.netloc or "@" in split.netloc:
        r.add(
            39,
            f"{at}.url",
            url,
            "write the host itself, without user info: templates go in the path and the query",
        )
    elif not split.hostname or not host_allowed(split.hostname, egress):
        host = split.hostname or split.netloc
        r.add(39, f"{at}.url", url, f'its host {host} is not in egress: add {{"host": "{host}"}}')
    headers = req.get("headers", {})
    for name, value in headers.items() if isinstance(headers, Mapping) else [("headers", headers)]:
        if not isinstance(name, str) or HEADER_NAME_RE.match(name) is None or name.lower() in RUNTIME_HEADERS:
            r.add(
                39,
                f"{at}.headers",
                name,
                'use header names such as "Accept"; the runtime sets Host, Content-Length and hop-by-hop '
                "headers",
            )
        elif not isinstance(value, str):
            r.add(39, f"{at}.headers.{name}", value, "use a text on one line (it may hold ${{ }})")
    query = req.get("query", {})
    if not isinstance(query, Mapping) or any(
        v is None or not isinstance(v, str | int | float | bool) for v in query.values()
    ):
        r.add(39, f"{at}.query", query, "use an object of parameter name to a text, a number, true or false")


def _check_poll_connections(
    r: Report, p: str, t: Mapping[str, Any], known: Mapping[str, Mapping[str, Any]]
) -> None:
    keys = t.get("connections", [])
    if not isinstance(keys, list):
        r.add(
            39,
            f"{p}.connections",
            keys,
            'use a list of the keys of the pack\'s connections, such as ["token"]',
        )
        return
    named = ", ".join(f'"{k}"' for k in known) or "none declared"
    poll = t.get("poll")
    req = poll.get("request") if isinstance(poll, Mapping) else None
    headers = req.get("headers") if isinstance(req, Mapping) else None
    sent = {str(h).lower(): h for h in headers} if isinstance(headers, Mapping) else {}
    for i, key in enumerate(keys):
        c = known.get(key) if isinstance(key, str) else None
        if c is None or key in keys[:i]:
            r.add(39, f"{p}.connections[{i}]", key, f"use each of the pack's connections once: {named}")
            continue
        inject: Mapping[str, Any] = c["inject"] if isinstance(c.get("inject"), Mapping) else {}
        injected = (
            "authorization"
            if c.get("kind") in ("bearer", "basic", "oauth2")
            else str(inject.get("header", "")).lower()
        )
        if injected in sent:
            r.add(
                39,
                f"{p}.poll.request.headers.{sent[injected]}",
                headers[sent[injected]],  # type: ignore[index]
                f'the connection "{key}" injects this header: the egress proxy sets it and a template '
                "may not",
            )


def _trigger_templates(p: str, t: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    def strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                yield from strings(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from strings(v, f"{path}[{i}]")

    for section, fields in (
        ("webhook", ("events", "id")),
        ("poll", ("request", "items", "dedupe", "cursor", "event")),
    ):
        value = t.get(section)
        if isinstance(value, Mapping):
            for field in fields:
                if field in value:
                    yield from strings(value[field], f"{p}.{section}.{field}")


def check_trigger_templates(m: Mapping[str, Any], r: Report) -> None:
    for p, t in triggers_of(m):
        for field, text in _trigger_templates(p, t):
            if OPEN not in text:
                continue
            try:
                pieces = parts(text)
            except TemplateError as exc:
                r.add(40, field, text, str(exc))
                continue
            for is_expr, source in pieces:
                problem = cel_problem(source) if is_expr else None
                if problem is not None:
                    how = "does not parse as CEL" if problem.startswith("syntax error") else "is refused"
                    r.add(40, field, text, f"${{{{ {source[:79]} }}}} {how}: {problem}")


TRIGGER_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (
    check_trigger_fields,
    check_trigger_schemas,
    check_webhooks,
    check_polls,
    check_trigger_templates,
)

__all__ = ["TRIGGER_CHECKS", "triggers_of"]
