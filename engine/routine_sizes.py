"""Checks of what in a routine could not travel through Temporal: text that is not Unicode and numbers JSON
cannot write, anywhere; literal `with:` and `outputs` over their payload limits; literal `foreach:` lists
over FOREACH_MAX_ITEMS items. Like engine.routine_checks, on the raw YAML data, as `(line, column,
message)` triples that engine.validate gathers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from engine import payloads
from engine.raw_routine import as_list, place, step_label
from engine.runs import FOREACH_MAX_ITEMS
from engine.yaml_positions import Located, Path

Triple = tuple[int, int, str]


def check_sizes(data: dict[str, Any], doc: Located) -> list[Triple]:
    """What could not travel through Temporal: text that is not Unicode anywhere, literal `with:` and
    `outputs` over their payload limits, and literal `foreach:` lists over FOREACH_MAX_ITEMS items."""
    problems = [(*at, f"{place(data, path)}: {message}") for at, path, message in _not_json(data, doc)]
    steps = as_list(data.get("steps"))
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        label = step_label(step, i)
        foreach = step.get("foreach")
        if isinstance(foreach, list) and len(foreach) > FOREACH_MAX_ITEMS:
            problems.append(
                (
                    *doc.position(("steps", i, "foreach")),
                    f"{label}: foreach: lists {len(foreach):,} items; a step runs at most "
                    f"{FOREACH_MAX_ITEMS:,}: split the list across steps or runs",
                )
            )
        with_ = step.get("with")
        if isinstance(with_, dict):
            limit = payloads.CALL_INPUT_LIMIT_BYTES
            problems.extend(_too_large(doc, ("steps", i, "with"), with_, f"{label}: with:", limit))
    outputs = data.get("outputs")
    if isinstance(outputs, dict):
        problems.extend(_too_large(doc, ("outputs",), outputs, "outputs", payloads.RUN_OUTPUTS_LIMIT_BYTES))
    return problems


def _too_large(doc: Located, path: Path, value: Any, what: str, limit: int) -> list[Triple]:
    try:
        payloads.measure(value, what, limit)
    except payloads.PayloadError as exc:
        if exc.code == "payload_too_large":  # text that is not Unicode is reported at its place
            return [(*doc.position(path), exc.message)]
    return []


def _not_json(value: Any, doc: Located) -> Iterator[tuple[tuple[int, int], Path, str]]:
    """Each string and key that UTF-8 cannot carry (a lone surrogate such as "\\ud800") and each number
    JSON cannot write (`.nan`, `.inf`), at its place: nothing is silently turned into null."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            yield doc.position(where), where, _NOT_A_NUMBER
        elif isinstance(item, str):
            if not payloads.is_unicode(item):
                yield doc.position(where), where, _NOT_UNICODE
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not payloads.is_unicode(key):
                    yield doc.key_position((*where, key)), where, f"a key: {_NOT_UNICODE}"
                stack.append((child, (*where, key)))
        elif isinstance(item, list):
            stack.extend((child, (*where, i)) for i, child in enumerate(item))


_NOT_UNICODE = "the text is not Unicode (a lone surrogate such as \\ud800): write the character itself"
_NOT_A_NUMBER = "JSON has no such number (.nan, .inf and -.inf): write a finite number, or null"
