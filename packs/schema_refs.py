"""A schema's references stay within the schema: what `$ref` may name, checked before a schema is kept.

An input or output schema is written by a routine author or a publisher and read by the api, so a
reference that leaves the document would make the api fetch a URL of the author's choosing (a request
from the api's network position) or wait on a server that never answers. And a reference that comes
back to where it is without reading into the value (`$ref: '#'` at the root, or two `allOf`s naming each
other) never ends. `reference_problem` finds the first of:

- a `$ref` that is not a fragment of the schema itself (`#`, `#/json/pointer`, `#anchor`): such a
  reference would be fetched (`https://...`, `other.json`);
- a `$ref` naming nothing in the schema;
- `$dynamicRef`, `$recursiveRef`, or an `$id` below the root (it changes what `#` means below it);
- a cycle of references and in-place subschemas (`allOf`, `anyOf`, `oneOf`, `not`, `if`, `then`, `else`,
  `dependentSchemas`) that never descends into the value. A reference under `properties`, `items` and
  the like is fine: each turn reads one level deeper, and a value's depth is bounded.

The validator (packs.schemas.Validator) never retrieves anything either: a reference it cannot find
within the schema is a validation error, not a fetch.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

Path = tuple[Any, ...]

_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_REFUSED = {
    "$dynamicRef": "$dynamicRef is not supported: use $ref to a part of this schema",
    "$recursiveRef": "$recursiveRef is not supported: use $ref to a part of this schema",
}


def reference_problem(schema: Any) -> tuple[Path, str] | None:
    """The first reference of `schema` that is refused (see the module's docstring): (path, sentence)."""
    refs: list[tuple[Path, str]] = []
    anchors: dict[str, Path] = {}
    found = _walk(schema, (), refs, anchors)
    if found is not None:
        return found
    targets: dict[Path, Path] = {}
    for path, ref in refs:
        target = _target(schema, ref, anchors)
        if target is None:
            return (*path, "$ref"), f"the $ref {ref!r} names nothing in this schema"
        targets[path] = target
    return _cycle(schema, targets)


def _walk(
    node: Any, path: Path, refs: list[tuple[Path, str]], anchors: dict[str, Path]
) -> tuple[Path, str] | None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            found = _walk(item, (*path, i), refs, anchors)
            if found is not None:
                return found
        return None
    if not isinstance(node, dict):
        return None
    for key, why in _REFUSED.items():
        if key in node:
            return (*path, key), why
    if "$id" in node and path:
        return (*path, "$id"), "an $id is taken at the schema's root only"
    if isinstance(node.get("$anchor"), str):
        anchors[node["$anchor"]] = path
    if "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return (*path, "$ref"), (
                f"the $ref {ref!r} is outside this schema: only references within it (#/...) are followed, "
                "nothing is fetched"
            )
        refs.append((path, ref))
    for key, value in node.items():
        if key not in _DATA_KEYWORDS:
            found = _walk(value, (*path, key), refs, anchors)
            if found is not None:
                return found
    return None


def _target(schema: Any, ref: str, anchors: dict[str, Path]) -> Path | None:
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        return anchors.get(fragment)
    node, path = schema, ()  # type: Any, Path
    for raw in fragment.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node, path = node[part], (*path, part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, path = node[int(part)], (*path, int(part))
        else:
            return None
    return path if isinstance(node, (dict, bool)) else None


def _at(schema: Any, path: Path) -> Any:
    for part in path:
        schema = schema[part]
    return schema


def _in_place(schema: Any, path: Path, targets: dict[Path, Path]) -> list[Path]:
    """The subschemas that apply to the same value as the schema at `path` (its reference's target too)."""
    node = _at(schema, path)
    if not isinstance(node, dict):
        return []
    next_: list[Path] = [targets[path]] if path in targets else []
    next_ += [(*path, k) for k in _IN_PLACE_ONE if isinstance(node.get(k), (dict, bool))]
    for key in _IN_PLACE_MANY:
        if isinstance(node.get(key), list):
            next_ += [(*path, key, i) for i in range(len(node[key]))]
    if isinstance(node.get("dependentSchemas"), dict):
        next_ += [(*path, "dependentSchemas", name) for name in node["dependentSchemas"]]
    return next_


def _cycle(schema: Any, targets: dict[Path, Path]) -> tuple[Path, str] | None:
    """A reference that comes back to itself through in-place subschemas only: its path and sentence."""
    done: set[Path] = set()
    for start in targets:
        if start in done:
            continue
        stack = [start]  # a depth-first walk; `stack` is the way from `start` to where it is
        while stack:
            pending = [p for p in _in_place(schema, stack[-1], targets) if p not in done]
            if not pending:
                done.add(stack.pop())
            elif pending[0] in stack:
                loop = stack[stack.index(pending[0]) :]
                ref = next(p for p in loop if p in targets)
                return (*ref, "$ref"), (
                    f"the $ref {_at(schema, ref)['$ref']!r} comes back to itself without reading into the "
                    "value: checking a value against it would never end"
                )
            else:
                stack.append(pending[0])
    return None
