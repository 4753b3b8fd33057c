"""Helpers of the publish checks: the report that words each violation, and value rendering."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

# Checks whose refusals are values this version does not take (hosted-tools: "checks 13 to 20").
VERSION_REFUSALS = range(13, 21)
_MAX_RENDER = 120


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
