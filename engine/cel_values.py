"""The values going in and out of a CEL evaluation, and the `Budget` that bounds it (engine.cel_runtime).

Each evaluation carries a `Budget`, shared by every expression of one field (a step's `with:`, `if:` or
`foreach:`, or the routine's `outputs`): `MAX_STEPS` evaluation steps, `MAX_VALUES` values read from the
run, `MAX_MADE` characters and items built, and a result of at most `MAX_VALUES` values and `MAX_TEXT`
characters of text. A bound that is passed raises `BudgetExceeded` with its sentence. `to_cel` turns
plain JSON data into CEL values, `to_json` a CEL result into plain JSON (or `NoJsonForm`), and
`cel_type` names a value's CEL type.

Deterministic, no I/O: the workflow runs this module (passed through its sandbox).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from celpy import celtypes

MAX_STEPS = 5_000
MAX_VALUES = 50_000
MAX_TEXT = 1024 * 1024
MAX_MADE = 4 * 1024 * 1024
ITERATION_STEPS = 2
"""Steps a macro item costs beyond its body: binding its variable is as dear as two operations."""

MAX_DEPTH = 64
"""Nesting of lists and maps a value read or a result may have (what a payload carries)."""


class BudgetExceeded(Exception):
    """An evaluation passed one of its bounds; the message says which, as a sentence."""


class Budget:
    """What the expressions of one field have spent so far."""

    __slots__ = ("exact", "given", "made", "steps", "values")

    def __init__(self, exact: Callable[[], bool] | None = None) -> None:
        self.steps = 0
        self.values = 0  # read from the run
        self.made = 0
        self.given = 0  # in results
        self.exact = exact  # whether a result's integers must fit JSON exactly (None: they must)

    def step(self, n: int = 1) -> None:
        """Spend `n` evaluation steps. Raises BudgetExceeded past MAX_STEPS."""
        self.steps += n
        if self.steps > MAX_STEPS:
            raise BudgetExceeded(
                f"the expressions of this field took more than {MAX_STEPS:,} evaluation steps, the bound "
                "that keeps one run from holding the workers: work on fewer items, or split the work"
            )

    def read(self, n: int) -> None:
        """Count `n` values read from the run. Raises BudgetExceeded past MAX_VALUES."""
        self.values += n
        if self.values > MAX_VALUES:
            raise BudgetExceeded(
                f"the expressions of this field read more than {MAX_VALUES:,} values (items of lists and "
                "maps) from the inputs and steps"
            )

    def make(self, n: int) -> None:
        """Count `n` characters or items built. Raises BudgetExceeded past MAX_MADE."""
        self.made += n
        if self.made > MAX_MADE:
            raise BudgetExceeded(
                f"the expressions of this field built more than {MAX_MADE:,} characters and items "
                "of lists and maps"
            )


# --- CEL type names -------------------------------------------------------------------------------

_TYPE_NAMES: dict[type, str] = {
    type(None): "null_type",
    celtypes.BoolType: "bool",
    celtypes.IntType: "int",
    celtypes.UintType: "uint",
    celtypes.DoubleType: "double",
    celtypes.StringType: "string",
    celtypes.BytesType: "bytes",
    celtypes.ListType: "list",
    celtypes.MapType: "map",
    celtypes.TimestampType: "google.protobuf.Timestamp",
    celtypes.DurationType: "google.protobuf.Duration",
}
_NAMES_BY_CLASS_NAME = {cls.__name__: name for cls, name in _TYPE_NAMES.items()}


def cel_type(value: Any) -> str:
    """The CEL name of a value's type: `null_type`, `int`, `string`, `list`, `map`, ..."""
    for cls in type(value).__mro__:
        if cls in _TYPE_NAMES:
            return _TYPE_NAMES[cls]
    return "type" if isinstance(value, type) else type(value).__name__


def cel_type_of_class_name(name: str) -> str | None:
    """The CEL type name for a Python class name found in a cel-python message (`NoneType`, `IntType`)."""
    return _NAMES_BY_CLASS_NAME.get(name)


# --- values in: JSON to CEL -----------------------------------------------------------------------

_TRUE, _FALSE = celtypes.BoolType(True), celtypes.BoolType(False)


def to_cel(value: Any, budget: Budget, depth: int = 0) -> Any:
    """Plain JSON data as CEL values, counting each item against `budget.read`.

    Much cheaper than `celpy.json_to_cel` (whose IntType costs ~10 us each): values are made without
    their range checks, which JSON data passes by construction (integers within +-(2^53 - 1)).

    Raises:
        BudgetExceeded: more values than the field may read, or nested deeper than MAX_DEPTH.
    """
    kind = type(value)
    if kind is str:
        return str.__new__(celtypes.StringType, value)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int:
        return int.__new__(celtypes.IntType, value)
    if kind is float:
        return float.__new__(celtypes.DoubleType, value)
    if value is None:
        return None
    if depth >= MAX_DEPTH:
        raise BudgetExceeded(f"a value read nests lists and maps deeper than {MAX_DEPTH} levels")
    if kind is list:
        budget.read(len(value))
        items = celtypes.ListType()
        items.extend([to_cel(item, budget, depth + 1) for item in value])
        return items
    if kind is dict:
        budget.read(len(value))
        mapping = celtypes.MapType()
        for key, item in value.items():
            dict.__setitem__(mapping, str.__new__(celtypes.StringType, key), to_cel(item, budget, depth + 1))
        return mapping
    raise BudgetExceeded(f"a value of type {kind.__name__} is not JSON data")


# --- values out: CEL to JSON ----------------------------------------------------------------------


MAX_JSON_INTEGER = 2**53 - 1
"""The largest integer a result may hold: what JSON carries exactly (JavaScript's Number.MAX_SAFE_INTEGER)."""


class NoJsonForm(Exception):
    """A result has no JSON form (bytes, NaN, a type); the message says why."""


def to_json(value: Any, budget: Budget, depth: int = 0) -> Any:
    """A CEL result as plain JSON data, within MAX_VALUES values and MAX_TEXT characters of text.

    Raises:
        BudgetExceeded: the result is larger or deeper than a result may be.
        NoJsonForm: the value has no JSON form.
    """
    if value is None or type(value) is bool:
        return value
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.TimestampType):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, celtypes.DurationType):
        return f"{value.total_seconds():g}s"
    if isinstance(value, int):
        if not -MAX_JSON_INTEGER <= value <= MAX_JSON_INTEGER and (budget.exact is None or budget.exact()):
            raise NoJsonForm(
                f"the result {int(value)} is beyond the integers JSON carries exactly (+-{MAX_JSON_INTEGER}, "
                "2^53 - 1): make it text with string(), or a double with double()"
            )
        return int(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise NoJsonForm(f"the result {float(value)} has no JSON form")
        return float(value)
    if isinstance(value, str):
        _text(budget, len(value))
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise NoJsonForm(
                    "the result holds text that is not Unicode (a lone surrogate such as \\ud800)"
                ) from None
        return str(value)
    if isinstance(value, bytes):
        sample = base64.b64encode(bytes(value[:12])).decode()
        raise NoJsonForm(f"the result is bytes (base64 {sample}...), which JSON cannot carry")
    if depth >= MAX_DEPTH:
        raise BudgetExceeded(f"the result nests lists and maps deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        _values(budget, len(value))
        return {_key(k, budget): to_json(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        _values(budget, len(value))
        return [to_json(v, budget, depth + 1) for v in value]
    raise NoJsonForm(f"the result of type {cel_type(value)} has no JSON form")


def _key(key: Any, budget: Budget) -> str:
    plain = to_json(key, budget)
    return plain if isinstance(plain, str) else json.dumps(plain)


def _values(budget: Budget, n: int) -> None:
    budget.given += n
    if budget.given > MAX_VALUES:
        raise BudgetExceeded(f"the result holds more than {MAX_VALUES:,} values (items of lists and maps)")


def _text(budget: Budget, n: int) -> None:
    budget.made += n
    if n > MAX_TEXT or budget.made > MAX_MADE:
        raise BudgetExceeded(f"the result holds more than {MAX_TEXT:,} characters of text")
