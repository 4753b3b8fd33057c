"""Running a compiled CEL expression with bounds, and the values going in and out of it.

cel-python evaluates a parse tree with no limit on the work or on what it builds, and some of its
standard functions answer as Python would. Here, each evaluation carries a `Budget`, shared by every
expression of one field (a step's `with:`, `if:` or `foreach:`, or the routine's `outputs`):

- `MAX_STEPS` evaluation steps: each operation, call or read, and `ITERATION_STEPS` more per macro item;
- `MAX_VALUES` values read from the run: items of the inputs and step outputs read (converted once a run);
- `MAX_MADE` characters and items built by operators, functions and macros;
- a result of at most `MAX_VALUES` values (items of lists and maps) and `MAX_TEXT` characters of text,

so that no field holds the workflow's thread for more than a few tens of milliseconds (see
`bench/hostile_routines.py`). A bound that is passed raises `BudgetExceeded` with its sentence.

The CEL standard functions below follow the language definition where cel-python does not:
conversions take only their overloads (`string(null)`, `int(true)`, `size(null)` are errors, `string(true)`
is `"true"`), and `list[i]` takes 0 <= i < size (`[1, 2, 3][-1]` is an error, not 3).

Deterministic, no I/O: the workflow runs this module (passed through its sandbox).
"""

from __future__ import annotations

import base64
import json
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator

from engine import cel_casts, cel_regex

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


# --- standard functions as CEL defines them --------------------------------------------------------

_T = celtypes


def _no_overload(name: str, args: tuple[Any, ...], takes: str) -> CELEvalError:
    kinds = ", ".join(cel_type(a) for a in args)
    return CELEvalError(f"{name}({kinds}): no such overload ({name}() takes {takes})", TypeError, ())


def _conversion(name: str, kinds: tuple[type, ...], takes: str, convert: Callable[[Any], Any]) -> Any:
    def function(*args: Any) -> Any:
        if len(args) != 1 or not isinstance(args[0], kinds):
            return _no_overload(name, args, takes)
        return convert(args[0])

    function.__name__ = name
    return function


def _string(value: Any) -> Any:
    if isinstance(value, _T.BoolType):
        return _T.StringType("true" if value else "false")
    if isinstance(value, _T.BytesType):
        try:
            return _T.StringType(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            return CELEvalError("string(bytes): the bytes are not UTF-8 text", ValueError, ())
    return _T.StringType(value)


def _size(*args: Any) -> Any:
    if len(args) != 1 or not isinstance(args[0], _T.StringType | _T.BytesType | _T.ListType | _T.MapType):
        return _no_overload("size", args, "string, bytes, list or map")
    return _T.IntType(len(args[0]))


def _index(container: Any, key: Any) -> Any:
    if isinstance(container, _T.ListType):
        if not isinstance(key, _T.IntType | _T.UintType):
            return _no_overload("_[_]", (container, key), "list[int] or map[key]")
        if not 0 <= key < len(container):
            return CELEvalError(
                f"list index out of range: {int(key)} (the list has {len(container)} items)", IndexError, ()
            )
        return container[key]
    if isinstance(container, _T.MapType):
        try:
            return container[key]
        except KeyError:
            shown = repr(str(key)) if isinstance(key, str) else str(key)
            return CELEvalError(f"no such key: {shown}", KeyError, ())
        except TypeError:
            return _no_overload("_[_]", (container, key), "list[int] or map[key]")
    return _no_overload("_[_]", (container, key), "list[int] or map[key]")


def _matches(*args: Any) -> Any:
    if len(args) != 2 or not all(isinstance(a, _T.StringType) for a in args):
        return _no_overload("matches", args, "string, string")
    return cel_regex.matches(str(args[0]), str(args[1]))


_NUMBERS = (_T.IntType, _T.UintType, _T.DoubleType, _T.StringType)
FUNCTIONS: dict[str, Any] = {
    "string": _conversion(
        "string",
        (
            _T.StringType,
            _T.IntType,
            _T.UintType,
            _T.DoubleType,
            _T.BoolType,
            _T.BytesType,
            _T.TimestampType,
            _T.DurationType,
        ),
        "string, int, uint, double, bool, bytes, timestamp or duration",
        _string,
    ),
    "int": _conversion(
        "int", (*_NUMBERS, _T.TimestampType), "int, uint, double, string or timestamp", _T.IntType
    ),
    "uint": _conversion("uint", _NUMBERS, "uint, int, double or string", _T.UintType),
    "double": _conversion("double", _NUMBERS, "double, int, uint or string", _T.DoubleType),
    "bool": _conversion("bool", (_T.BoolType, _T.StringType), "bool or string", _T.BoolType),
    "bytes": _conversion("bytes", (_T.BytesType, _T.StringType), "bytes or string", _T.BytesType),
    "size": _size,
    "_[_]": _index,
    "matches": _matches,
}
"""cel-python's standard functions replaced by ones that take only CEL's overloads."""

_FUNCTIONS = {**FUNCTIONS, "_in_": cel_casts.operator_in}
"""The standard functions an evaluation finds before cel-python's own."""

_BASE = Activation(annotations=dict(celpy.googleapis), functions=_FUNCTIONS)


# --- the bounded evaluator -----------------------------------------------------------------------

_MADE_BY_PRIMARY = frozenset({"ident_arg", "dot_ident_arg", "list_lit", "map_lit"})


class _Evaluator(cel_casts.Evaluator):
    """cel-python's evaluator, counting each step and what it builds against a `Budget`."""

    def __init__(self, ast: lark.Tree, activation: Activation, budget: Budget) -> None:
        super().__init__(ast, activation)
        self.budget = budget

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _MacroEvaluator(ast, self.activation, self.budget)

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        # Activation.resolve_variable builds a typing.Union on each call (tens of microseconds): the same
        # lookup, without it.
        try:
            return self.activation.identifiers.resolve_name(self.activation.package, name).value
        except KeyError:
            return self.activation.functions[name]

    def _visit_tree(self, tree: lark.Tree) -> Any:
        self.budget.step()
        value = super()._visit_tree(tree)
        kind = tree.data
        if (
            kind in ("addition", "member_dot_arg")
            or (kind == "primary" and getattr(tree.children[0], "data", None) in _MADE_BY_PRIMARY)
        ) and isinstance(value, str | bytes | list | dict):
            self.budget.make(len(value))
        return value

    def literal(self, tree: lark.Tree) -> Any:
        # cel-python makes a literal's value each time it is read (an int costs ~10 us); values of
        # literals are immutable, so each is made once.
        token = tree.children[0] if len(tree.children) == 1 else None
        if not isinstance(token, lark.Token):
            return super().literal(tree)
        key = (token.type, str(token))
        found = _LITERALS.get(key, _LITERALS)
        if found is _LITERALS:
            found = super().literal(tree)
            if not isinstance(found, CELEvalError) and len(_LITERALS) < LITERALS_KEPT:
                _LITERALS[key] = found
        return found


LITERALS_KEPT = 4096
_LITERALS: dict[tuple[str, str], Any] = {}


class _MacroEvaluator(_Evaluator):
    """The evaluator of a macro's body (`x` in `list.map(v, x)`): each item costs ITERATION_STEPS more."""

    def evaluate(self, context: Any = None) -> Any:
        self.budget.step(ITERATION_STEPS)
        return super().evaluate(context)

    def set_activation(self, values: Any) -> Evaluator:
        # The item's variable over the enclosing names, chained rather than copied (cel-python clones
        # every name in scope for each item).
        self.activation = self.base_activation.nested_activation(vars=values)
        return self


def _status_function(name: str, value: bool) -> Callable[..., Any]:
    def function(*args: Any) -> Any:
        if args:
            return CELEvalError(f"{name}() takes no arguments", TypeError, ())
        return _TRUE if value else _FALSE

    function.__name__ = name
    return function


def status_functions(status: Mapping[str, bool]) -> dict[str, Any]:
    """The status functions of one step's `if:` (`success()`, ...), each answering its value here."""
    return {name: _status_function(name, value) for name, value in status.items()}


def run(
    tree: lark.Tree, names: Mapping[str, Any], budget: Budget, functions: Mapping[str, Any] | None = None
) -> Any:
    """Evaluate a (runnable) parse tree over CEL values.

    Args:
        tree: the runnable tree.
        names: the CEL values of the names the expression reads.
        budget: what the evaluation may spend.
        functions: functions beyond the standard ones (a step's status functions), by name.

    Returns:
        The CEL result; a failure of the expression is a `CELEvalError` value, raised.

    Raises:
        CELEvalError: the expression failed (CEL's own errors).
        BudgetExceeded: a bound was passed.
    """
    base = _BASE
    if functions:
        base = Activation(functions=ChainMap(dict(functions), _FUNCTIONS), based_on=_BASE)
    return _Evaluator(tree, base, budget).evaluate(dict(names))
