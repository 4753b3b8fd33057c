"""JSON Schema (2020-12) validation whose patterns are matched in linear time.

`jsonschema` matches `pattern` and `patternProperties` with Python's backtracking `re`: a schema
`pattern: '^(a+)+$'` and a 30-character value hold a process for seconds, doubling with each
character. `Validator` here is the 2020-12 validator with those two keywords matched by RE2 (no
backtracking: time linear in the text), used wherever a value from a caller or an author is checked
against a schema from another one (action inputs and outputs, routine inputs, connection params). A
pattern RE2 cannot run (backreferences, lookaround) fails validation with a sentence saying so, and
`pattern_problem` lets a check refuse it up front.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 refuses is our sentence, not a line on stderr


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


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    compiled = _compiled(patrn)
    if compiled is None:
        yield ValidationError(str(pattern_problem(patrn)))
    elif compiled.search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


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
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


Validator = validators.extend(
    Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)
"""Draft 2020-12 with linear-time `pattern` and `patternProperties`."""


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
