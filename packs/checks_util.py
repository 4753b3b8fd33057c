"""Helpers of the publish checks: the report that words each violation, and value rendering."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from publicsuffixlist import PublicSuffixList

# Checks whose refusals are values this version does not take (hosted-tools: "checks 13 to 20").
VERSION_REFUSALS = range(13, 21)
_MAX_RENDER = 120
# A host name of egress and of a connection's hosts: lowercase labels, optionally "*." in front.
HOST_RE = re.compile(
    r"^(\*\.)?[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
# Names no public service answers under: special-use (RFC 6761, 6762, 7686, 8375, 9476) and private-use
# top-level domains, and the reverse-lookup tree. The public suffix list does not hold most of them.
_SPECIAL_USE = ("arpa", "onion", "local", "localhost", "test", "invalid", "internal", "alt", "lan", "home")


@functools.cache
def _suffixes() -> PublicSuffixList:
    """The public suffix list bundled with `publicsuffixlist` (unknown top-level domains are no suffix)."""
    return PublicSuffixList(accept_unknown=False)


def public_host_problem(host: str) -> str | None:
    """Why `host` (a HOST_RE name, maybe `*.`) is not a public DNS name an egress may reach, or None.

    A public name ends in a known public suffix and is not one itself (`api.example.com`, not `com`),
    so no IP address (`127.0.0.1`, `2130706433`, `0`), special-use name (`localhost`,
    `metadata.google.internal`) or wildcard over a public suffix (`*.com`, `*.github.io`) passes.
    """
    name = host.removeprefix("*.")
    if name.rsplit(".", 1)[-1] in _SPECIAL_USE or name.endswith(".home.arpa"):
        return "it is a special-use name that no public service answers under"
    if _suffixes().privatesuffix(name) is None:
        if host.startswith("*."):
            return f"a wildcard must sit under a registered domain, and {name} is a public suffix or unknown"
        return "it is not a public DNS name under a known public suffix (an IP address, or a private name)"
    return None


# An HTTP header name (an RFC 9110 token).
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
HOP_BY_HOP = (
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
)
# Headers the HTTP runtime sets itself: no template sets them, no connection injects them.
RUNTIME_HEADERS = ("host", "content-length", *HOP_BY_HOP)


class _Missing(str):
    """An `accepted` text that also says the field is absent."""


def missing_or(present: bool, accepted: str) -> str:
    """`accepted`, marked so that the sentence says "is missing" when the field is absent."""
    return accepted if present else _Missing(accepted)


def render(value: Any) -> str:
    """A value as compact JSON ({"vcpu": 2, "memoryMb": 512}), cut at 120 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _MAX_RENDER else text[: _MAX_RENDER - 1] + "…"


def check_text(
    report: Report, n: int, m: Mapping[str, Any], field: str, prefix: str, limit: int, line: bool
) -> None:
    """Refuse `m[field]` under check `n` unless it is a text of 1 to `limit` characters (on one line)."""
    value = m.get(field)
    ok = isinstance(value, str) and value.strip() != "" and len(value) <= limit
    if ok and line and isinstance(value, str) and ("\n" in value or "\r" in value):
        ok = False
    if not ok:
        what = f"use a text of 1 to {limit} characters" + (" on one line" if line else "")
        report.add(n, prefix + field, value, missing_or(field in m, what))


def schema_error(schema: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """Why `schema` is not valid JSON Schema (2020-12): (path suffix, value at fault, reason), or None."""
    from jsonschema import Draft202012Validator, SchemaError

    from packs.schemas import schema_problem

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return path_of(exc.path), exc.instance, f"it is not valid JSON Schema (2020-12): {exc.message}"
    refused = schema_problem(schema)
    if refused is not None:
        where, why = refused
        return path_of(where), None, why
    return None


def same(a: Any, b: Any) -> bool:
    """JSON equality that tells true from 1 and 1.0 from 1."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def path_of(parts: Iterable[Any]) -> str:
    """A JSON path suffix: ["properties", "a", 0] -> ".properties.a[0]"."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def is_tool_pack(m: Mapping[str, Any]) -> bool:
    """Whether a manifest is a tool pack: it has a `tool` section or a vm action."""
    if "tool" in m:
        return True
    return any(isinstance(a.get("impl"), Mapping) and a["impl"].get("kind") == "vm" for _, a in actions_of(m))


def actions_of(m: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each action object with its field path ("actions[0]")."""
    actions = m.get("actions")
    if isinstance(actions, list):
        for i, a in enumerate(actions):
            if isinstance(a, Mapping):
                yield f"actions[{i}]", a


def egress_hosts(m: Mapping[str, Any]) -> list[str]:
    """The host texts of `egress` (whatever else is wrong with it)."""
    egress = m.get("egress")
    items = egress if isinstance(egress, list) else []
    return [e["host"] for e in items if isinstance(e, Mapping) and isinstance(e.get("host"), str)]


def connections_by_key(m: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The connection objects of the manifest by their (text) key."""
    conns = m.get("connections")
    items = conns if isinstance(conns, list) else []
    return {c["key"]: c for c in items if isinstance(c, Mapping) and isinstance(c.get("key"), str)}


class _ViolationType(Protocol):
    def __init__(self, check: int, field: str, message: str) -> None: ...


V = TypeVar("V", bound=_ViolationType)


class Report:
    """Collects violations and words them: "check N: <field> <value> is not accepted: ..."."""

    def __init__(self) -> None:
        self._items: list[tuple[int, str, str]] = []

    def add(
        self,
        n: int,
        field: str,
        value: Any,
        accepted: str,
        *,
        name_only: bool = False,
        sentence: str | None = None,
    ) -> None:
        """Record one violation of check `n` on `field`."""
        if sentence is not None:
            text = sentence
        elif isinstance(accepted, _Missing):
            text = f"{field} is missing: {accepted}"
        else:
            scope = " in this version" if n in VERSION_REFUSALS else ""
            shown = "" if name_only else " " + render(value)
            text = f"{field}{shown} is not accepted{scope}: {accepted}"
        self._items.append((n, field, f"check {n}: {text}"))

    def violations(self, cls: type[V]) -> list[V]:
        """The violations, by check number, in the order they were found within a check."""
        ordered = sorted(enumerate(self._items), key=lambda e: (e[1][0], e[0]))
        return [cls(check=n, field=f, message=msg) for _, (n, f, msg) in ordered]
