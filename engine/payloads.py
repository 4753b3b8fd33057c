"""What a value may be to travel through Temporal: its encoded size, its nesting and its text.

Every value a run hands to Temporal is one JSON payload (pydantic's data converter): the workflow's
input (the routine and the run's inputs), each step's call input (`with:`) and output, the run's
result, and a failure's details. Temporal refuses a payload over 2 MiB (the dev server's
`limit.blobSize.error`; it warns from 512 KiB) and the workflow task that carries it fails again and
again; pydantic cannot read JSON nested deeper than 200 levels; UTF-8 cannot carry a lone surrogate
(`"\\ud800"`). `measure` says which of these a value breaks, in a sentence that names it, before it
is handed over. Limits of the engine, each below Temporal's so that the wrappers around a value fit:

| what | limit |
|---|---|
| a run's inputs, in all | `RUN_INPUTS_LIMIT_BYTES` (1 MiB; the routine travels beside them) |
| a step's call input (`with:`) | `CALL_INPUT_LIMIT_BYTES` (1 MiB, the api's call request limit) |
| a step's output (one call's) | `STEP_OUTPUT_LIMIT_BYTES` (1.5 MiB) |
| the run's `outputs` | `RUN_OUTPUTS_LIMIT_BYTES` (1 MiB) |
| nesting of lists and objects | `MAX_DEPTH` (64 levels, as routine files and request bodies) |

Standard library only: the workflow sandbox imports this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError

KIB = 1024
MIB = 1024 * KIB

PAYLOAD_LIMIT_BYTES = 2 * MIB
"""Temporal's limit on one payload (`limit.blobSize.error` of the dev server and the server's default)."""

HISTORY_EVENTS_LIMIT = 51_200
"""Temporal ends a run whose history reaches this many events (`limit.historyCount.error`)."""

HISTORY_SIZE_LIMIT_BYTES = 50 * MIB
"""Temporal ends a run whose history reaches this size (`limit.historySize.error`)."""

RUN_INPUTS_LIMIT_BYTES = 1 * MIB
CALL_INPUT_LIMIT_BYTES = 1 * MIB
STEP_OUTPUT_LIMIT_BYTES = 3 * MIB // 2
RUN_OUTPUTS_LIMIT_BYTES = 1 * MIB
MAX_DEPTH = 64


class PayloadError(EngineError):
    """A value cannot travel through Temporal.

    Attributes:
        code: `payload_too_large` (over its size limit) or `payload_invalid` (too deep, or text
            that is not Unicode).
        message: one sentence naming the value and the limit.
        field: where the value is (`inputs.items`), when known.
    """

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        self.code = code
        self.message = message
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Measured:
    """A value that can travel, and its encoded size in bytes."""

    size: int


def size_text(size: int) -> str:
    """A byte count for a sentence: `812 bytes`, `244.14 KiB`, `1 MiB`, `1.05 MiB`."""
    if size < KIB:
        return f"{size} bytes"
    value, unit = (size / KIB, "KiB") if size < MIB else (size / MIB, "MiB")
    return f"{value:.2f}".rstrip("0").rstrip(".") + f" {unit}"


def encode(value: Any) -> bytes:
    """The value as compact UTF-8 JSON, as the data converter writes it (sizes agree within bytes).

    Raises:
        UnicodeEncodeError: a string holds a lone surrogate.
        ValueError: a float is NaN or infinite. RecursionError: the value nests without bound.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


def measure(value: Any, what: str, limit: int) -> Measured:
    """Check that a value can travel as a payload of at most `limit` bytes.

    Args:
        value: plain JSON data (dicts, lists, strings, numbers, booleans, None).
        what: how sentences name the value (`step fetch: with:`, `input 'items'`).
        limit: the most bytes it may take, encoded.

    Returns:
        Its encoded size.

    Raises:
        PayloadError: too deep or not Unicode (`payload_invalid`), or too large (`payload_too_large`).
    """
    deep = _too_deep(value)
    if deep is not None:
        raise PayloadError(
            "payload_invalid",
            f"{what} nests lists and objects deeper than {MAX_DEPTH} levels (at {deep or 'the top'})",
        )
    try:
        size = len(encode(value))
    except UnicodeEncodeError:
        where = _surrogate_at(value) or "the top"
        raise PayloadError(
            "payload_invalid",
            f"{what} holds text that is not Unicode (a lone surrogate such as \\ud800, at {where})",
        ) from None
    except (ValueError, TypeError) as exc:
        raise PayloadError("payload_invalid", f"{what} is not JSON: {exc}") from None
    if size > limit:
        raise PayloadError("payload_too_large", _too_large_text(what, size, limit))
    return Measured(size)


def _too_large_text(what: str, size: int, limit: int) -> str:
    return f"{what} is {size_text(size)} encoded, more than the {size_text(limit)} it may take"


WHOLE_INPUTS = "the run's inputs"


def check_inputs(inputs: dict[str, Any]) -> int:
    """Check a run's inputs (defaults filled in): each can travel, and all fit RUN_INPUTS_LIMIT_BYTES.

    Returns:
        Their encoded size.

    Raises:
        PayloadError: naming the input at fault (`field` is `inputs.<name>`).
    """
    sizes: dict[str, int] = {}
    for name, value in inputs.items():
        try:
            sizes[name] = measure(value, f"input '{name}'", RUN_INPUTS_LIMIT_BYTES).size
        except PayloadError as exc:
            raise PayloadError(exc.code, exc.message, f"inputs.{name}") from None
    # the whole as `encode` writes it, from its parts (not encoded again): {"name":value,...}
    size = 1 + sum(len(encode(name)) + 1 + part + 1 for name, part in sizes.items()) if sizes else 2
    if size > RUN_INPUTS_LIMIT_BYTES:
        name = max(sizes, key=lambda n: sizes[n])
        raise PayloadError(
            "payload_too_large",
            f"{_too_large_text(WHOLE_INPUTS, size, RUN_INPUTS_LIMIT_BYTES)}; the largest is input "
            f"'{name}' ({size_text(sizes[name])})",
            f"inputs.{name}",
        )
    return size


def _too_deep(value: Any) -> str | None:
    """The path of the first list or object nested deeper than MAX_DEPTH, else None (iterative)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            continue
        if depth > MAX_DEPTH:
            return path
        for key, child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, f"{path}.{key}" if path else str(key)))
    return None


def _surrogate_at(value: Any) -> str | None:
    """The path of the first string (or key) that UTF-8 cannot carry."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not is_unicode(item):
                return path or None
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and not is_unicode(key):
                    return where
                stack.append((child, where))
        elif isinstance(item, list):
            stack.extend((child, f"{path}.{i}" if path else str(i)) for i, child in enumerate(item))
    return None


def is_unicode(text: str) -> bool:
    """Whether UTF-8 can carry a text (a lone surrogate such as "\\ud800" it cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
