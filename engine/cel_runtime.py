"""Running a compiled CEL expression with bounds.

cel-python evaluates a parse tree with no limit on the work or on what it builds, and some of its
standard functions answer as Python would. Here, each evaluation carries a `Budget` (engine.cel_values:
evaluation steps, each operation, call or read and `ITERATION_STEPS` more per macro item; values read;
characters and items built; the result's size), so that no field holds the workflow's thread for more
than a few tens of milliseconds (see `bench/hostile_routines.py`). A bound that is passed raises
`BudgetExceeded` with its sentence.

The CEL standard functions below follow the language definition where cel-python does not:
conversions take only their overloads (`string(null)`, `int(true)`, `size(null)` are errors, `string(true)`
is `"true"`), and `list[i]` takes 0 <= i < size (`[1, 2, 3][-1]` is an error, not 3).

Deterministic, no I/O: the workflow runs this module (passed through its sandbox).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator

from engine import cel_casts, cel_regex
from engine.cel_values import ITERATION_STEPS, Budget, cel_type

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
        return celtypes.BoolType(value)

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
