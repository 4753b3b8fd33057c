"""JSON Schema (2020-12) validation whose patterns are matched in linear time.

`jsonschema` matches `pattern` and `patternProperties` with Python's backtracking `re`: a schema
`pattern: '^(a+)+$'` and a 30-character value hold a process for seconds, doubling with each
character. `Validator` here is the 2020-12 validator with those two keywords matched by RE2 (no
backtracking: time linear in the text), used wherever a value from a caller or an author is checked
against a schema from another one (action inputs and outputs, routine inputs, connection params). A
pattern RE2 cannot run (backreferences, lookaround) fails validation with a sentence saying so, and
`pattern_problem` lets a check refuse it up front.

It never fetches a reference: its registry holds the JSON Schema metaschemas only and retrieves nothing,
so a `$ref` that is not found within the schema is an error (`schema_errors` says so as a validation
error), and packs.schema_refs refuses such schemas before they are kept. `uniqueItems` is checked in
time linear in the array (jsonschema's own falls back to comparing every pair for mixed items).

RE2's time is linear in the text, but its constant is the size of the pattern's compiled program
(`(a|b){1,1000}c` over 100 KB: 4 s here). A match may cost at most `MATCH_COST` (program instructions
times characters, ~0.1 s), and one `schema_errors` check all its matches together `CHECK_COST`
(~1 s): past either, the value fails validation with a sentence saying so, before the match is tried.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Iterator
from typing import Any

import re2
from cachetools import LRUCache
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable

from packs.schema_refs import reference_problem

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 refuses is our sentence, not a line on stderr

MATCH_COST = 10_000_000
"""The most one `pattern` or `patternProperties` match may cost: program instructions times characters."""

CHECK_COST = 100_000_000
"""The most all the matches of one `schema_errors` check may cost together."""

_spent: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("schema_match_cost", default=None)


@functools.lru_cache(maxsize=2048)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error:
        return None


def pattern_problem(pattern: str) -> str | None:
    """Why RE2 cannot run this pattern (backreferences, lookaround...), or None when it can."""
    if _compiled(pattern) is not None:
        return None
    return f"the pattern {pattern!r} uses a feature that cannot be matched in linear time (RE2 refuses it)"


def _too_costly(compiled: Any, patrn: str, text: str) -> str | None:
    """Why matching `text` would be more work than allowed (and, if not, count its cost), or None."""
    cost = compiled.programsize * max(len(text), 1)
    if cost > MATCH_COST:
        return (
            f"a text of {len(text):,} characters is too long to check against the pattern {patrn!r:.100} "
            f"({compiled.programsize:,} instructions): one match may cost {MATCH_COST:,} instructions times "
            "characters"
        )
    spent = _spent.get()
    if spent is not None:
        spent[0] += cost
        if spent[0] > CHECK_COST:
            return (
                f"checking the value against its schema's patterns is more work than one check may take "
                f"({CHECK_COST:,} instructions times characters): fewer or shorter texts"
            )
    return None


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    compiled = _compiled(patrn)
    if compiled is None:
        yield ValidationError(str(pattern_problem(patrn)))
    elif (why := _too_costly(compiled, patrn, instance)) is not None:
        yield ValidationError(why)
    elif compiled.search(instance) is None:
        yield ValidationError(f"{instance!r:.200} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in properties.items():
        compiled = _compiled(patrn)
        if compiled is None:
            yield ValidationError(str(pattern_problem(patrn)))
            continue
        for key, value in instance.items():
            if (why := _too_costly(compiled, patrn, key)) is not None:
                yield ValidationError(why)
                return
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _same_key(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, bool) or value is None:
        return ("c", value)
    if isinstance(value, (int, float)):
        return ("n", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_same_key(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _same_key(v)) for k, v in value.items()))
    return ("o", id(value))


def _unique_items(validator: Any, unique: bool, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            key = _same_key(item)
            if key in seen:
                yield ValidationError(f"{instance!r:.200} has non-unique elements")
                return
            seen.add(key)


def _no_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs classes: mypy sees no fields


_LOCAL_ONLY: Registry[Any] = Registry(retrieve=_no_retrieval).with_resources(  # type: ignore[call-arg]
    METASCHEMAS.items()
)

_Validator = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties, "uniqueItems": _unique_items},
)


_built: LRUCache[int, tuple[Any, Any]] = LRUCache(maxsize=512)
_built_lock = threading.Lock()


def Validator(schema: Any) -> Any:  # noqa: N802 (a validator class, as jsonschema's are called)
    """Draft 2020-12, linear-time `pattern`, `patternProperties` and `uniqueItems`; it fetches nothing.

    Built once per schema object and kept (the last 512): an action's schemas are the same objects call
    after call (the registry's cache of versions), and building one took ~6% of the api's CPU a call. The
    entry holds the schema itself, so its `id` is not reused while the entry lives."""
    key = id(schema)
    with _built_lock:
        kept = _built.get(key)
    if kept is not None and kept[0] is schema:
        return kept[1]
    validator = _Validator(schema, registry=_LOCAL_ONLY)
    with _built_lock:
        _built[key] = (schema, validator)
    return validator


def schema_errors(schema: Any, value: Any) -> list[ValidationError]:
    """`Validator(schema).iter_errors(value)`, as a list; a reference that cannot be followed is one error
    saying so, and so is a check whose patterns would cost more than `CHECK_COST`."""
    budget = _spent.set([0])
    try:
        return list(Validator(schema).iter_errors(value))
    except Unresolvable as exc:
        return [
            ValidationError(f"the schema's reference {exc.ref!r} names nothing in it: it cannot be followed")
        ]
    except RecursionError:
        return [
            ValidationError("the schema's references come back to themselves: the value cannot be checked")
        ]
    finally:
        _spent.reset(budget)


def schema_problem(schema: Any) -> tuple[tuple[Any, ...], str] | None:
    """Why a schema that is valid JSON Schema is still refused: a pattern RE2 cannot run, a reference
    that leaves the schema, names nothing or never ends (packs.schema_refs), or an empty `enum`: (path,
    sentence)."""
    return refused_pattern(schema) or reference_problem(schema) or _empty_enum(schema)


def _empty_enum(schema: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str] | None:
    """The first `enum: []` of a schema (valid JSON Schema, but no value could ever match it)."""
    if isinstance(schema, dict):
        if schema.get("enum") == []:
            return (*path, "enum"), "enum lists no value, so no value could ever match: list at least one"
        children = ((k, v) for k, v in schema.items() if k not in _DATA_KEYWORDS)
    elif isinstance(schema, list):
        children = enumerate(schema)  # type: ignore[assignment]
    else:
        return None
    for key, child in children:
        found = _empty_enum(child, (*path, key))
        if found is not None:
            return found
    return None


_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def refused_pattern(schema: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str] | None:
    """The first `pattern` or `patternProperties` key of a schema that RE2 cannot run: (path, sentence)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _DATA_KEYWORDS:
                continue
            if key == "pattern" and isinstance(value, str) and (problem := pattern_problem(value)):
                return (*path, key), problem
            if key == "patternProperties" and isinstance(value, dict):
                for name in value:
                    if isinstance(name, str) and (problem := pattern_problem(name)):
                        return (*path, key, name), problem
            found = refused_pattern(value, (*path, key))
            if found is not None:
                return found
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            found = refused_pattern(item, (*path, i))
            if found is not None:
                return found
    return None
