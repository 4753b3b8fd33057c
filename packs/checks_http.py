"""Publish checks of declarative HTTP actions: 11 and 28 to 32 (their connections: checks_connections).

An http action's request is a template: CEL inside `${{ }}` with `input` and the non-secret
`connections.<key>.<param>` in scope; its response's `success`, `map` and `errors` also see
`response` (`status`, `headers` by lowercase name, `body`). A template may write the path and query
of the URL, query parameters, headers and the body, never the host, and never a header or query
parameter that a connection of the action injects: the egress proxy sets those.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from packs.cel_syntax import MAX_EXPRESSION_CHARS, MAX_MANIFEST_EXPRESSION_CHARS
from packs.checks_util import (
    HEADER_NAME_RE,
    RUNTIME_HEADERS,
    Report,
    actions_of,
    check_text,
    connections_by_key,
    egress_hosts,
    missing_or,
)
from packs.manifest import HTTP_METHODS, host_allowed
from packs.templates import MARK, OPEN, TemplateError, cel_problem, is_single_expression, parts, skeleton

IMPL_FIELDS = ("kind", "request", "response")
REQUEST_FIELDS = ("method", "url", "query", "headers", "body")
RESPONSE_FIELDS = ("success", "map", "errors")
ERROR_FIELDS = ("when", "code", "message", "retryable")
METHODS_WITH_BODY = ("POST", "PUT", "PATCH")
RUNTIME_HINT = (
    "the HTTP runtime sets Host, Content-Length and the hop-by-hop headers (Connection, Keep-Alive, "
    "Proxy-Authenticate, Proxy-Authorization, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade)"
)
_CODE_RE = re.compile(r"^[a-z0-9_-]{1,60}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _http_actions(m: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    for p, a in actions_of(m):
        impl = a.get("impl")
        if isinstance(impl, Mapping) and impl.get("kind") == "http":
            yield p, a, impl


def _split_url(url: str) -> SplitResult | None:
    try:
        return urlsplit(skeleton(url))
    except ValueError:
        return None


def _port(split: SplitResult) -> str | None:
    """The URL's port as written when it is no port (0, past 65535), else None."""
    try:
        port = split.port
    except ValueError:
        return split.netloc.rpartition(":")[2]
    return "0" if port == 0 else None


def check_request_url(m: Mapping[str, Any], r: Report) -> None:
    egress = egress_hosts(m)
    for p, _, impl in _http_actions(m):
        req = impl.get("request")
        if not isinstance(req, Mapping):
            r.add(
                11,
                f"{p}.impl.request",
                req,
                missing_or("request" in impl, 'use {"method": "GET", "url": "https://..."}'),
            )
            continue
        if req.get("method") not in HTTP_METHODS:
            r.add(
                11,
                f"{p}.impl.request.method",
                req.get("method"),
                missing_or("method" in req, "use GET, POST, PUT, PATCH or DELETE"),
            )
        url, field = req.get("url"), f"{p}.impl.request.url"
        split = _split_url(url) if isinstance(url, str) and url.startswith("https://") else None
        if split is None or not split.netloc:
            r.add(11, field, url, missing_or("url" in req, "use an https:// URL"))
        elif MARK in split.netloc or OPEN in split.netloc:
            r.add(
                11,
                field,
                url,
                "a template may not choose the host: write the host itself, as in "
                '"https://api.example.com/items/${{ input.id }}"; templates go in the path and the query',
            )
        elif "@" in split.netloc:
            r.add(11, field, url, "use a URL without user info: credentials come from the pack's connections")
        elif (port := _port(split)) is not None:
            r.add(11, field, url, f"its port {port} is not a port from 1 to 65535")
        elif not split.hostname or not host_allowed(split.hostname, egress):
            host = split.hostname or split.netloc
            r.add(11, field, url, f'its host {host} is not in egress: add {{"host": "{host}"}}')


def _check_query(r: Report, at: str, query: Any) -> None:
    if not isinstance(query, Mapping):
        r.add(
            28,
            f"{at}.query",
            query,
            'use an object of parameter name to value, such as {"q": "${{ input.q }}"}',
        )
        return
    for name, value in query.items():
        if not isinstance(name, str) or not 0 < len(name) <= 100 or OPEN in name or _CONTROL_RE.search(name):
            r.add(28, f"{at}.query", name, "a query parameter name is a literal text of 1 to 100 characters")
        elif value is None or not isinstance(value, str | int | float | bool):
            r.add(
                28,
                f"{at}.query.{name}",
                value,
                "use a text, a number, true or false (a text may hold ${{ }})",
            )


def _check_headers(r: Report, at: str, headers: Any) -> None:
    if not isinstance(headers, Mapping):
        r.add(
            28,
            f"{at}.headers",
            headers,
            'use an object of header name to text, such as {"Accept": "text/csv"}',
        )
        return
    for name, value in headers.items():
        if not isinstance(name, str) or HEADER_NAME_RE.match(name) is None:
            r.add(28, f"{at}.headers", name, 'a header name is a token such as "Accept" or "X-Api-Version"')
        elif name.lower() in RUNTIME_HEADERS:
            r.add(28, f"{at}.headers.{name}", value, RUNTIME_HINT + ": remove it")
        elif not isinstance(value, str) or _CONTROL_RE.search(value.replace("\t", " ")):
            r.add(28, f"{at}.headers.{name}", value, "use a text on one line (it may hold ${{ }})")


def check_request_fields(m: Mapping[str, Any], r: Report) -> None:
    for p, _, impl in _http_actions(m):
        req = impl.get("request")
        if not isinstance(req, Mapping):
            continue  # check 11 names it
        at = f"{p}.impl.request"
        for key in req:
            if key not in REQUEST_FIELDS:
                hint = "a request has only the fields " + ", ".join(REQUEST_FIELDS)
                r.add(28, f"{at}.{key}", req[key], hint, name_only=True)
        if "query" in req:
            _check_query(r, at, req["query"])
        if "headers" in req:
            _check_headers(r, at, req["headers"])
        method = req.get("method")
        if "body" in req and method in HTTP_METHODS and method not in METHODS_WITH_BODY:
            r.add(
                28,
                f"{at}.body",
                req["body"],
                f"a {method} request has no body: send one with POST, PUT or PATCH",
            )


def check_injected(m: Mapping[str, Any], r: Report) -> None:
    known = connections_by_key(m)
    for p, a, impl in _http_actions(m):
        req, keys = impl.get("request"), a.get("connections")
        if not isinstance(req, Mapping) or not isinstance(keys, list):
            continue
        headers: dict[str, str] = {}  # lowercase header name -> the connection that injects it
        queries: dict[str, str] = {}
        for key in keys:
            c = known.get(key) if isinstance(key, str) else None
            inject = c.get("inject") if c is not None else None
            if c is not None and c.get("kind") in ("bearer", "basic", "oauth2"):
                headers["authorization"] = key
            elif c is not None and c.get("kind") == "api_key" and isinstance(inject, Mapping):
                if isinstance(inject.get("header"), str):
                    headers[inject["header"].lower()] = key
                if isinstance(inject.get("query"), str):
                    queries[inject["query"].lower()] = key
        at, why = f"{p}.impl.request", "the egress proxy sets it and a template may not"
        for field, names, what in (("headers", headers, "header"), ("query", queries, "query parameter")):
            given = req.get(field)
            for name, value in given.items() if isinstance(given, Mapping) else ():
                key = names.get(name.lower()) if isinstance(name, str) else None
                if key is not None:
                    r.add(
                        29,
                        f"{at}.{field}.{name}",
                        value,
                        f'the connection "{key}" injects this {what}: {why}',
                    )
        url = req.get("url")
        split = _split_url(url) if isinstance(url, str) and queries else None
        for name, _ in parse_qsl(split.query, keep_blank_values=True) if split is not None else ():
            if name.lower() in queries or MARK in name:
                key = queries.get(name.lower()) or next(iter(queries.values()))
                r.add(29, f"{at}.url", url, f'the connection "{key}" injects a query parameter: {why}')


def _check_errors(r: Report, at: str, errors: Any) -> None:
    shape = 'use a list of {"when": "${{ ... }}", "code": "not_found", "message": ..., "retryable": false}'
    if not isinstance(errors, list):
        r.add(31, f"{at}.errors", errors, shape)
        return
    for i, rule in enumerate(errors):
        e = f"{at}.errors[{i}]"
        if not isinstance(rule, Mapping):
            r.add(31, e, rule, shape)
            continue
        for key in rule:
            if key not in ERROR_FIELDS:
                hint = "an error rule has only the fields " + ", ".join(ERROR_FIELDS)
                r.add(31, f"{e}.{key}", rule[key], hint, name_only=True)
        if not is_single_expression(rule.get("when")):
            hint = 'use one ${{ }} expression such as "${{ response.status == 404 }}"'
            r.add(31, f"{e}.when", rule.get("when"), missing_or("when" in rule, hint))
        code = rule.get("code")
        if not isinstance(code, str) or _CODE_RE.match(code) is None:
            hint = 'use 1 to 60 lowercase letters, digits, "_" and "-", such as "not_found"'
            r.add(31, f"{e}.code", code, missing_or("code" in rule, hint))
        if "message" in rule:
            check_text(r, 31, rule, "message", e + ".", 1000, False)
        if "retryable" in rule and not isinstance(rule["retryable"], bool):
            r.add(31, f"{e}.retryable", rule["retryable"], "use true or false")


def check_response(m: Mapping[str, Any], r: Report) -> None:
    for p, _, impl in _http_actions(m):
        for key in impl:
            if key not in IMPL_FIELDS:
                hint = "an http impl has only the fields " + ", ".join(IMPL_FIELDS)
                r.add(30, f"{p}.impl.{key}", impl[key], hint, name_only=True)
        if "response" not in impl:
            continue
        resp, at = impl["response"], f"{p}.impl.response"
        if not isinstance(resp, Mapping):
            r.add(
                30, at, resp, 'use {"success": ..., "map": ..., "errors": [...]}, each optional, or omit it'
            )
            continue
        for key in resp:
            if key not in RESPONSE_FIELDS:
                hint = "a response has only the fields " + ", ".join(RESPONSE_FIELDS)
                r.add(30, f"{at}.{key}", resp[key], hint, name_only=True)
        if "success" in resp and not is_single_expression(resp["success"]):
            hint = 'use one ${{ }} expression such as "${{ response.status == 200 }}", or omit it for any 2xx'
            r.add(30, f"{at}.success", resp["success"], hint)
        if "errors" in resp:
            _check_errors(r, at, resp["errors"])


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def _template_sites(p: str, impl: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every text of an http impl that may hold `${{ }}`, with its field path."""
    req, resp = impl.get("request"), impl.get("response")
    if isinstance(req, Mapping):
        for key in ("url", "query", "headers", "body"):
            if key in req:
                yield from _strings(req[key], f"{p}.impl.request.{key}")
    if not isinstance(resp, Mapping):
        return
    for key in ("success", "map"):
        if key in resp:
            yield from _strings(resp[key], f"{p}.impl.response.{key}")
    errors = resp.get("errors")
    for i, rule in enumerate(errors if isinstance(errors, list) else []):
        for key in ("when", "message"):
            if isinstance(rule, Mapping) and key in rule:
                yield from _strings(rule[key], f"{p}.impl.response.errors[{i}].{key}")


def _templates(m: Mapping[str, Any]) -> Iterator[tuple[str, str, list[tuple[bool, str]] | TemplateError]]:
    """Every text of the http actions that holds `${{`, with its field path and its pieces (or why it has
    none)."""
    for p, _, impl in _http_actions(m):
        for field, text in _template_sites(p, impl):
            if OPEN in text:
                try:
                    yield field, text, parts(text)
                except TemplateError as exc:
                    yield field, text, exc


def _expressions_length(m: Mapping[str, Any], r: Report) -> bool:
    """Whether the templates' expressions pass MAX_MANIFEST_EXPRESSION_CHARS in all (said at the field that
    passes it). An expression over its own cap counts one past it: its own problem is the one to say."""
    total = 0
    for field, text, pieces in _templates(m):
        if isinstance(pieces, TemplateError):
            continue
        total += sum(min(len(source), MAX_EXPRESSION_CHARS + 1) for is_expr, source in pieces if is_expr)
        if total > MAX_MANIFEST_EXPRESSION_CHARS:
            r.add(
                32,
                field,
                text,
                f"the templates' expressions pass here the {MAX_MANIFEST_EXPRESSION_CHARS:,} characters "
                f"one manifest may have in all ({total:,} up to this field): make them fewer or shorter",
            )
            return True
    return False


def check_templates(m: Mapping[str, Any], r: Report) -> None:
    if _expressions_length(m, r):
        return  # none is parsed: ~0.2 s of CPU each for the longest
    for field, text, pieces in _templates(m):
        if isinstance(pieces, TemplateError):
            r.add(32, field, text, str(pieces))
            continue
        for is_expr, source in pieces:
            problem = cel_problem(source) if is_expr else None
            if problem is not None:
                shown = source if len(source) <= 80 else source[:79] + "…"
                how = "does not parse as CEL" if problem.startswith("syntax error") else "is refused"
                r.add(32, field, text, f"${{{{ {shown} }}}} {how}: {problem}")


HTTP_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (
    check_request_url,
    check_request_fields,
    check_injected,
    check_response,
    check_templates,
)

__all__ = ["HTTP_CHECKS"]
