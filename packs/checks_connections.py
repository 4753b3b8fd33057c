"""Publish checks of connections, the credentials of declarative packs, and of actions' use of them: 24 to 27.

A connection names the hosts the egress proxy adds its secret to (each within the pack's egress) and,
for an api_key, where the key goes. Only http and js actions list connections; the proxy injects
`Authorization` for bearer, basic and oauth2, and the api_key's header or query parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from packs.checks_util import (
    HEADER_NAME_RE,
    HOST_RE,
    RUNTIME_HEADERS,
    Report,
    actions_of,
    check_text,
    connections_by_key,
    egress_hosts,
    is_tool_pack,
    missing_or,
    schema_error,
)
from packs.manifest import CONNECTION_KINDS, host_allowed

CONNECTION_FIELDS = ("key", "kind", "title", "hosts", "params", "inject")
# Headers an api_key connection may not inject.
NOT_INJECTED = ("authorization", "cookie", *RUNTIME_HEADERS)
_QUERY_NAME_RE = re.compile(r"^[A-Za-z0-9._~-]{1,100}$")


def _within(host: str, egress: list[str]) -> bool:
    """Whether every host a connection host names is one egress allows."""
    if host.startswith("*."):
        return host in egress or host_allowed(host[2:], [e for e in egress if e.startswith("*.")])
    return host_allowed(host, egress)


def _check_params(r: Report, at: str, params: Any) -> None:
    if not isinstance(params, Mapping):
        r.add(
            24,
            f"{at}.params",
            params,
            'use a JSON Schema of type "object" of the non-secret values, or omit it',
        )
        return
    problem = schema_error(params)
    if problem is not None:
        where, instance, why = problem
        r.add(24, f"{at}.params{where}", instance, why)
    elif params.get("type") != "object":
        r.add(24, f"{at}.params.type", params.get("type"), 'use "object" at the top of the schema')


def _check_hosts(r: Report, at: str, c: Mapping[str, Any], egress: list[str]) -> None:
    hosts = c.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        hint = 'use a non-empty list of host names within egress, such as ["api.example.com"]'
        r.add(25, f"{at}.hosts", hosts, missing_or("hosts" in c, hint))
        return
    for j, host in enumerate(hosts):
        if not isinstance(host, str) or HOST_RE.match(host) is None:
            r.add(25, f"{at}.hosts[{j}]", host, 'use a lowercase host name such as "api.example.com"')
        elif not _within(host, egress):
            r.add(
                25, f"{at}.hosts[{j}]", host, f'it is not within egress: add {{"host": "{host}"}} to egress'
            )


def _check_inject(r: Report, at: str, c: Mapping[str, Any]) -> None:
    kind, inject = c.get("kind"), c.get("inject")
    if kind != "api_key":
        if "inject" in c and kind in CONNECTION_KINDS:
            r.add(
                26,
                f"{at}.inject",
                inject,
                "only an api_key connection has inject: bearer and oauth2 go as Authorization: Bearer, "
                "basic as Authorization: Basic",
            )
        return
    shape = 'use {"header": "X-Api-Key"} or {"query": "api_key"}, where the egress proxy puts the key'
    if not isinstance(inject, Mapping) or len(inject) != 1 or not set(inject) <= {"header", "query"}:
        r.add(26, f"{at}.inject", inject, missing_or("inject" in c, shape))
        return
    [(where, name)] = inject.items()
    if where == "query":
        if not isinstance(name, str) or _QUERY_NAME_RE.match(name) is None:
            hint = 'use a query parameter name of letters, digits, ".", "_", "~" and "-", such as "api_key"'
            r.add(26, f"{at}.inject.query", name, hint)
    elif not isinstance(name, str) or HEADER_NAME_RE.match(name) is None:
        r.add(26, f"{at}.inject.header", name, 'use a header name such as "X-Api-Key"')
    elif name.lower() in NOT_INJECTED:
        r.add(
            26,
            f"{at}.inject.header",
            name,
            "the egress proxy does not set Authorization, Cookie, Host, Content-Length or a hop-by-hop "
            'header: use the API\'s own key header, such as "X-Api-Key"',
        )


def check_connections(m: Mapping[str, Any], r: Report) -> None:
    conns = m.get("connections")
    if is_tool_pack(m) or not isinstance(conns, list):
        return  # check 16 refuses a tool pack's connections, check 7 a connections that is no list
    egress = egress_hosts(m)
    for i, c in enumerate(conns):
        if not isinstance(c, Mapping):
            continue
        at = f"connections[{i}]"
        for key in c:
            if key not in CONNECTION_FIELDS:
                hint = "a connection has only the fields " + ", ".join(CONNECTION_FIELDS)
                r.add(24, f"{at}.{key}", c[key], hint, name_only=True)
        if c.get("kind") not in CONNECTION_KINDS:
            kinds = 'use "api_key", "bearer", "basic" or "oauth2"'
            r.add(24, f"{at}.kind", c.get("kind"), missing_or("kind" in c, kinds))
        check_text(r, 24, c, "title", at + ".", 100, True)
        if "params" in c:
            _check_params(r, at, c["params"])
        _check_hosts(r, at, c, egress)
        _check_inject(r, at, c)


def check_action_connections(m: Mapping[str, Any], r: Report) -> None:
    known = connections_by_key(m)
    named = ", ".join(f'"{k}"' for k in known)
    unknown = f"use a key of the pack's connections: {named}" if known else "the pack declares no connections"
    for p, a in actions_of(m):
        if "connections" not in a:
            continue
        keys, impl = a["connections"], a.get("impl")
        kind = impl.get("kind") if isinstance(impl, Mapping) else None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            r.add(
                27,
                f"{p}.connections",
                keys,
                'use a list of the keys of the pack\'s connections, such as ["token"]',
            )
        elif keys and kind not in ("http", "js"):
            r.add(27, f"{p}.connections", keys, "only http and js actions use connections: omit it")
        else:
            for i, key in enumerate(keys):
                if key not in known:
                    r.add(27, f"{p}.connections[{i}]", key, unknown)
                elif key in keys[:i]:
                    r.add(27, f"{p}.connections[{i}]", key, "list each connection once")


CONNECTION_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (
    check_connections,
    check_action_connections,
)

__all__ = ["CONNECTION_CHECKS"]
