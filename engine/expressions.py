"""`${{ }}` expressions: CEL (cel-python) over `inputs`, `steps`, `item` and `index`.

A string that is exactly one `${{ expr }}` (surrounding blanks aside) keeps the expression's type;
any other string with expressions in it is text with each result spliced in (strings as they are,
everything else as compact JSON). `evaluate` walks dicts, lists and strings and returns plain JSON
types only.

Expressions are bounded (packs.cel_syntax: length, nesting and macros, checked when they compile;
engine.cel_runtime: work, values read and what is built, checked while all the expressions of one
value are evaluated), and follow CEL's definition where cel-python would answer as Python does.
The names in scope are held by an `engine.scope.Scope`, which converts each to CEL once.

This module is deterministic and safe to pass through into the Temporal workflow sandbox: no I/O,
clock or randomness at import or evaluation time. (cel-python reads its grammar file once, on the
first compile in the process; compiled expressions are cached by text, the most recently used up to
CACHE_CHARACTERS characters of text in all.)

Its parts: engine.expression_text (finding `${{ }}` in strings; the errors, `ExpressionError` and
`ExpressionSyntaxError`), engine.cel_tree (what a parse tree reads and calls), engine.cel_compile
(compiling, and the compiled expressions' cache), and here what an expression reads and calls, and
evaluating. Callers use the names of this module (`__all__`), wherever each is defined.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import lark
from celpy.evaluation import CELEvalError

from engine import cel_runtime, cel_values
from engine.cel_compile import CACHE_CHARACTERS, Compiled, compiled
from engine.cel_tree import FUNCTIONS, STATUS_FUNCTIONS, Reference, StatusCall
from engine.cel_values import Budget
from engine.expression_text import (
    CLOSE,
    FOREACH_NAMES,
    OPEN,
    SHOWN_CHARS,
    STEP_FIELDS,
    Expr,
    ExpressionError,
    ExpressionSyntaxError,
    TooManyItems,
    has_expressions,
    iter_expressions,
    shown,
    split_template,
    whole_expression,
)
from engine.scope import Scope

__all__ = [  # the expressions' API, wherever each part lives (engine.expression_text, engine.cel_tree)
    "CACHE_CHARACTERS",
    "CLOSE",
    "FOREACH_NAMES",
    "FUNCTIONS",
    "OPEN",
    "SHOWN_CHARS",
    "STATUS_FUNCTIONS",
    "STEP_FIELDS",
    "Compiled",
    "Context",
    "Expr",
    "ExpressionError",
    "ExpressionSyntaxError",
    "Reference",
    "StatusCall",
    "TooManyItems",
    "check",
    "check_template",
    "condition_expression",
    "evaluate",
    "evaluate_condition",
    "evaluate_expression",
    "evaluate_foreach",
    "functions",
    "has_expressions",
    "iter_expressions",
    "references",
    "referenced_steps",
    "runs_after_cancel",
    "shown",
    "split_template",
    "status_calls",
    "to_text",
    "uses_status",
    "whole_expression",
]


def check(expr: str) -> None:
    """Parse one CEL expression.

    Raises:
        ExpressionSyntaxError: with the line and column of the problem inside `expr`.
    """
    compiled(expr)


def check_template(text: str) -> None:
    """Parse every `${{ }}` of a string (the `${{` pairing too).

    Raises:
        ExpressionSyntaxError: `offset` is relative to the expression text.
    """
    for part in split_template(text):
        if isinstance(part, Expr):
            check(part.source)


# --- what an expression reads and calls --------------------------------------------------------


def functions(expr: str) -> list[str]:
    """The names of the functions and methods an expression calls (`size`, `startsWith`, ...).

    Raises:
        ExpressionSyntaxError: the expression does not parse or its shape is refused.
    """
    return list(compiled(expr).functions)


def references(expr: str) -> list[Reference]:
    """Every free top-level name an expression reads, with its member chain.

    `steps.fetch.output.text` gives `Reference("steps", ("fetch", "output", "text"))`;
    `steps["fetch"]` is read like `steps.fetch`. Variables bound by macros (`names.map(n, ...)`)
    are not free and are left out.

    Raises:
        ExpressionSyntaxError: the expression does not parse or its shape is refused.
    """
    return list(compiled(expr).references)


def status_calls(expr: str) -> list[StatusCall]:
    """The status functions (`success()`, `failure()`, `always()`, `cancelled()`) an expression calls.

    Raises:
        ExpressionSyntaxError: the expression does not parse or its shape is refused.
    """
    return list(compiled(expr).status_calls)


def uses_status(condition: str | bool | None) -> bool:
    """Whether a step's `if:` calls a status function (else it runs only when `success()` too).

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    if not isinstance(condition, str):
        return False
    return bool(status_calls(condition_expression(condition)))


def runs_after_cancel(condition: str | bool | None) -> bool:
    """Whether a step's `if:` may run it once its run is cancelled: it calls `always()` or `cancelled()`.

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    if not isinstance(condition, str):
        return False
    calls = status_calls(condition_expression(condition))
    return any(call.name in ("always", "cancelled") for call in calls)


def referenced_steps(expr: str) -> set[str]:
    """The step ids an expression reads as `steps.<id>` (or `steps["<id>"]`).

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    return {ref.path[0] for ref in references(expr) if ref.root == "steps" and ref.path}


# --- evaluating ---------------------------------------------------------------------------------

Context = Mapping[str, Any] | Scope
"""The names in scope: a `Scope`, or plain data by name (`{"inputs": ..., "steps": ...}`)."""


def evaluate(value: Any, context: Context, budget: Budget | None = None) -> Any:
    """Evaluate every `${{ }}` inside a value and return plain JSON types.

    All the expressions of the value share one `Budget` (engine.cel_runtime; `budget`, or a new one): a
    field's work, what it reads and what it builds are bounded together.

    Args:
        value: a JSON-like value (dicts, lists, strings, numbers, booleans, None).
        context: the names in scope: `inputs`, `steps` (`{id: {"output", "status"}}`), and inside
            a foreach `item` and `index`; a `Scope` of them converts each to CEL once for many calls.

    Returns:
        The value with each whole-value expression replaced by its result (type kept) and each
        interpolated string rendered as text.

    Raises:
        ExpressionError: an expression failed or passed a bound; the message names it and the problem.
    """
    return _walk(value, _scope(context), budget or Budget())


def _scope(context: Context) -> Scope:
    return context if isinstance(context, Scope) else Scope(context)


def _walk(value: Any, scope: Scope, budget: Budget) -> Any:
    if isinstance(value, str):
        return _render(value, scope, budget) if OPEN in value else value
    if isinstance(value, Mapping):
        return {str(k): _walk(v, scope, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, scope, budget) for v in value]
    return value


def _render(text: str, scope: Scope, budget: Budget) -> Any:
    whole = whole_expression(text)
    if whole is not None:
        return _run(whole, scope, budget)
    out: list[str] = []
    size = 0
    for part in split_template(text):
        piece = to_text(_run(part.source, scope, budget)) if isinstance(part, Expr) else part
        size += len(piece)
        if size > cel_values.MAX_TEXT and isinstance(part, Expr):
            raise ExpressionError(
                part.source, f"the text it is spliced into is longer than {cel_values.MAX_TEXT:,} characters"
            )
        out.append(piece)
    return "".join(out)


def evaluate_expression(expr: str, context: Context) -> Any:
    """Evaluate one bare CEL expression (no `${{ }}`) and return a plain JSON value.

    Raises:
        ExpressionError: the expression does not parse, fails or passes a bound.
    """
    return _run(expr, _scope(context), Budget())


def _run(
    expr: str,
    scope: Scope,
    budget: Budget,
    status: Mapping[str, bool] | None = None,
    most: int | None = None,
) -> Any:
    program = compiled(expr)
    try:
        names = scope.activation(program.reads, budget)
        functions = cel_runtime.status_functions(status) if status and program.status_calls else None
        result = cel_runtime.run(program.tree, names, budget, functions)
        if most is not None and isinstance(result, list) and len(result) > most:
            raise TooManyItems(len(result), most)  # before converting 10,000 items to refuse them
        return cel_values.to_json(result, budget)
    except CELEvalError as exc:
        raise ExpressionError(expr, _eval_problem(exc)) from None
    except (cel_values.BudgetExceeded, cel_values.NoJsonForm) as exc:
        raise ExpressionError(expr, str(exc)) from None
    except RecursionError:
        raise ExpressionError(expr, "the expression nests too deeply to evaluate") from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise ExpressionError(expr, str(exc) or type(exc).__name__) from None


_FIELD_SELECTION = re.compile(r"with type: '<class '(?:[\w.]+\.)?(\w+)'>' does not support field selection")
_CLASS = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")


def _eval_problem(exc: CELEvalError) -> str:
    text = str(exc.args[0]) if exc.args else "evaluation failed"
    selection = _FIELD_SELECTION.search(text)
    if selection is not None:
        kind = cel_values.cel_type_of_class_name(selection.group(1)) or selection.group(1)
        field = _field_name(exc)
        return f"cannot read {field + ' ' if field else ''}of a value of type {kind}: only a map has fields"
    if text.startswith("undeclared reference to"):
        text = text.split(" (in activation", 1)[0]
    elif text.startswith("found no matching overload"):
        types = [cel_values.cel_type_of_class_name(name) or name for name in _CLASS.findall(text)]
        text = "no operator or function fits these operand types" + (
            f" ({', '.join(types)})" if types else ""
        )
    elif text.startswith("no such member in mapping"):
        text = text.replace("no such member in mapping", "no such key")
    elif text == "invalid_argument" and len(exc.args) > 1 and exc.args[1] is IndexError:
        text = "list index out of range"
    elif text == "no such overload" and exc.token is not None:
        text = f"{exc.token}(): no such overload for these arguments"
    return text


def _field_name(exc: CELEvalError) -> str:
    """`.name` of the member read that failed, from the tree cel-python attached to its error."""
    tree = exc.tree
    if tree is not None and len(tree.children) == 2 and isinstance(tree.children[1], lark.Token):
        return f".{tree.children[1]}"
    return ""


def to_text(value: Any) -> str:
    """How a value reads when spliced into a string: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def evaluate_condition(
    condition: str | bool | None,
    context: Context,
    status: Mapping[str, bool] | None = None,
    budget: Budget | None = None,
) -> bool:
    """Evaluate a step's `if:`: a bare CEL expression or one `${{ }}`; absent means true.

    Args:
        condition: the step's `if:`.
        context: the names in scope.
        status: what the status functions answer for this step, by name (`success`, `failure`,
            `always`, `cancelled`); without it, an `if:` that calls one fails.

    Raises:
        ExpressionError: the expression fails or its result is not a boolean.
    """
    if condition is None or isinstance(condition, bool):
        return condition is not False
    expr = condition_expression(condition)
    result = _run(expr, _scope(context), budget or Budget(), status)
    if not isinstance(result, bool):
        raise ExpressionError(expr, f"if: must give true or false, got {shown(to_text(result))}")
    return result


def condition_expression(condition: str) -> str:
    """The CEL text of an `if:` or `foreach:` string: `${{ x }}` gives `x`, a bare `x` stays `x`."""
    whole = whole_expression(condition)
    return whole if whole is not None else condition.strip()


def evaluate_foreach(
    foreach: str | list[Any], context: Context, most: int | None = None, budget: Budget | None = None
) -> list[Any]:
    """The list a step's `foreach:` runs over.

    Raises:
        ExpressionError: the expression fails or its result is not a list.
        TooManyItems: the list has more than `most` items (counted before its items are converted).
    """
    if isinstance(foreach, list):
        items: list[Any] = evaluate(foreach, context, budget)
        if most is not None and len(items) > most:
            raise TooManyItems(len(items), most)
        return items
    expr = condition_expression(foreach)
    result = _run(expr, _scope(context), budget or Budget(), most=most)
    if not isinstance(result, list):
        raise ExpressionError(expr, f"foreach: must give a list, got {shown(to_text(result))}")
    return result
