"""`${{ }}` expressions: CEL (cel-python) over `inputs`, `steps`, `item` and `index`.

A string that is exactly one `${{ expr }}` (surrounding blanks aside) keeps the expression's type;
any other string with expressions in it is text with each result spliced in (strings as they are,
everything else as compact JSON). `evaluate` walks dicts, lists and strings and returns plain JSON
types only.

This module is deterministic and safe to pass through into the Temporal workflow sandbox: no I/O,
clock or randomness at import or evaluation time. (cel-python reads its grammar file once, on the
first compile in the process; compiled programs are cached by expression text.)

Errors::

    ExpressionError            an expression could not be evaluated (names the expression)
     └── ExpressionSyntaxError an expression does not parse (line and column inside it)
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError

from engine.errors import EngineError
from packs.templates import find_close

OPEN = "${{"
CLOSE = "}}"

#: The names an expression may read at the top level, and where.
ROOT_NAMES = frozenset({"inputs", "steps"})
FOREACH_NAMES = frozenset({"item", "index"})
STEP_FIELDS = frozenset({"output", "status"})

# CEL macros whose first argument binds a variable local to the call.
_MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})


class ExpressionError(EngineError):
    """An expression could not be evaluated.

    Attributes:
        expression: the CEL text (without `${{ }}`).
        problem: what went wrong, one sentence.
    """

    def __init__(self, expression: str, problem: str) -> None:
        self.expression = expression
        self.problem = problem
        super().__init__(f"${{{{ {expression} }}}}: {problem}")


class ExpressionSyntaxError(ExpressionError):
    """An expression does not parse, or a `${{` is not closed.

    Attributes:
        line: 1-based line inside the expression text.
        column: 1-based column inside that line.
        offset: 0-based character offset inside the expression text.
    """

    def __init__(self, expression: str, problem: str, line: int, column: int, offset: int) -> None:
        self.line = line
        self.column = column
        self.offset = offset
        super().__init__(expression, problem)


@dataclass(frozen=True)
class Expr:
    """One `${{ }}` found in a string.

    Attributes:
        source: the CEL text, stripped of surrounding blanks.
        start: index of `${{` in the string.
        body: index of the first character of `source` in the string.
        end: index just past the closing `}}`.
    """

    source: str
    start: int
    body: int
    end: int


def split_template(text: str) -> list[str | Expr]:
    """Split a string into literal text and `${{ }}` expressions, in order.

    Raises:
        ExpressionSyntaxError: a `${{` has no matching `}}`, or an expression is empty.
    """
    parts: list[str | Expr] = []
    pos = 0
    while True:
        start = text.find(OPEN, pos)
        if start < 0:
            if pos < len(text):
                parts.append(text[pos:])
            return parts
        if start > pos:
            parts.append(text[pos:start])
        inner = start + len(OPEN)
        close = find_close(text, inner)
        raw = text[inner:close] if close >= 0 else text[inner:]
        lead = len(raw) - len(raw.lstrip())
        source = raw.strip()
        if close < 0:
            raise ExpressionSyntaxError(source, "'${{' is not closed by '}}'", 1, 1, 0)
        if not source:
            raise ExpressionSyntaxError(source, "the expression is empty", 1, 1, 0)
        parts.append(Expr(source=source, start=start, body=inner + lead, end=close + len(CLOSE)))
        pos = close + len(CLOSE)


def whole_expression(text: str) -> str | None:
    """The CEL text if `text` is exactly one `${{ expr }}` (blanks aside), else None."""
    if OPEN not in text:
        return None
    parts = split_template(text.strip())
    if len(parts) == 1 and isinstance(parts[0], Expr):
        return parts[0].source
    return None


def has_expressions(value: Any) -> bool:
    """Whether a value (or anything inside it) holds a `${{`."""
    return any(True for _ in iter_expressions(value))


def iter_expressions(value: Any) -> Iterator[str]:
    """Every CEL text inside a value, depth first; unparsable templates yield nothing."""
    if isinstance(value, str):
        if OPEN in value:
            try:
                parts = split_template(value)
            except ExpressionSyntaxError:
                return
            for part in parts:
                if isinstance(part, Expr):
                    yield part.source
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from iter_expressions(item)
    elif isinstance(value, list):
        for item in value:
            yield from iter_expressions(item)


# --- compiling ---------------------------------------------------------------------------------

_lock = threading.Lock()
_env: celpy.Environment | None = None
_programs: dict[str, tuple[lark.Tree, celpy.Runner]] = {}


def _environment() -> celpy.Environment:
    global _env
    if _env is None:
        _env = celpy.Environment()
    return _env


def _compiled(expr: str) -> tuple[lark.Tree, celpy.Runner]:
    found = _programs.get(expr)
    if found is not None:
        return found
    with _lock:
        env = _environment()
        try:
            tree = env.compile(expr)
        except celpy.CELParseError as exc:
            raise _syntax_error(expr, exc) from None
        found = (tree, env.program(tree))
        _programs[expr] = found
    return found


def _syntax_error(expr: str, exc: celpy.CELParseError) -> ExpressionSyntaxError:
    line = exc.line or 1
    column = exc.column or 1
    lines = expr.split("\n")
    offset = min(sum(len(text) + 1 for text in lines[: line - 1]) + column - 1, len(expr))
    cause = exc.__context__
    token = getattr(cause, "token", None)
    if offset >= len(expr) or (token is not None and token.type == "$END"):
        what = "the expression ends too early"
        offset = len(expr)
        column = len(lines[-1]) + 1
        line = len(lines)
    elif token is not None:
        what = f"unexpected {str(token)!r}"
    else:
        what = f"unexpected {expr[offset]!r}"
    return ExpressionSyntaxError(expr, f"syntax error at column {column}: {what}", line, column, offset)


def check(expr: str) -> None:
    """Parse one CEL expression.

    Raises:
        ExpressionSyntaxError: with the line and column of the problem inside `expr`.
    """
    _compiled(expr)


def check_template(text: str) -> None:
    """Parse every `${{ }}` of a string (the `${{` pairing too).

    Raises:
        ExpressionSyntaxError: `offset` is relative to the expression text.
    """
    for part in split_template(text):
        if isinstance(part, Expr):
            check(part.source)


# --- reading the tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One `root.a.b` chain read by an expression: `root` and the member names after it."""

    root: str
    path: tuple[str, ...]


#: The functions and macros an expression may call: CEL's standard library as cel-python has it.
FUNCTIONS = frozenset(
    name for name in celpy.evaluation.base_functions if name[:1].isalpha()
) | {"has", "all", "exists", "exists_one", "map", "filter"}


def functions(expr: str) -> list[str]:
    """The names of the functions and methods an expression calls (`size`, `startsWith`, ...).

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    tree, _ = _compiled(expr)
    found: list[str] = []
    for node in tree.iter_subtrees_topdown():
        if node.data == "ident_arg" and node.children:
            found.append(str(node.children[0]))
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            found.append(str(node.children[1]))
    return found


def references(expr: str) -> list[Reference]:
    """Every free top-level name an expression reads, with its member chain.

    `steps.fetch.output.text` gives `Reference("steps", ("fetch", "output", "text"))`;
    `steps["fetch"]` is read like `steps.fetch`. Variables bound by macros (`names.map(n, ...)`)
    are not free and are left out.

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    tree, _ = _compiled(expr)
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and len(node.children) >= 3:
            method, args = node.children[1], node.children[2]
            if str(method) in _MACROS and isinstance(args, lark.Tree) and args.children:
                name = _ident_of(args.children[0])
                if name:
                    bound.add(name)
    found: list[Reference] = []
    for node in tree.iter_subtrees_topdown():
        if node.data != "member":
            continue
        chain = _chain(node)
        if chain is not None and chain[0] not in bound:
            found.append(Reference(chain[0], tuple(chain[1:])))
    return _outermost(found)


def _outermost(refs: list[Reference]) -> list[Reference]:
    """Drop references that are prefixes of a longer one read at the same place."""
    result: list[Reference] = []
    for ref in refs:
        if result and result[-1].root == ref.root and result[-1].path[: len(ref.path)] == ref.path:
            continue
        result.append(ref)
    return result


def _ident_of(node: Any) -> str | None:
    """The name if `node` is an expression that is one bare identifier."""
    while isinstance(node, lark.Tree):
        if node.data == "ident":
            return str(node.children[0])
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


def _chain(member: lark.Tree) -> list[str] | None:
    """`a.b["c"].d` as ["a", "b", "c", "d"] (stopping at the first non-constant index)."""
    names: list[str] = []
    node: Any = member
    while isinstance(node, lark.Tree):
        if node.data == "member":
            node = node.children[0]
        elif node.data == "member_dot":
            names.append(str(node.children[1]))
            node = node.children[0]
        elif node.data == "member_index":
            key = _string_literal(node.children[1])
            names = [] if key is None else [*names, key]
            node = node.children[0]
        elif node.data == "primary":
            inner = node.children[0]
            if isinstance(inner, lark.Tree) and inner.data == "ident":
                names.append(str(inner.children[0]))
                return list(reversed(names))
            return None
        else:
            return None
    return None


def _string_literal(node: Any) -> str | None:
    while isinstance(node, lark.Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, lark.Token) and node.type == "STRING_LIT":
        text = str(node)
        if text[:1] in "\"'" and len(text) >= 2:
            return text[1:-1]
    return None


def referenced_steps(expr: str) -> set[str]:
    """The step ids an expression reads as `steps.<id>` (or `steps["<id>"]`).

    Raises:
        ExpressionSyntaxError: the expression does not parse.
    """
    return {ref.path[0] for ref in references(expr) if ref.root == "steps" and ref.path}


# --- evaluating ---------------------------------------------------------------------------------


def evaluate(value: Any, context: Mapping[str, Any]) -> Any:
    """Evaluate every `${{ }}` inside a value and return plain JSON types.

    Args:
        value: a JSON-like value (dicts, lists, strings, numbers, booleans, None).
        context: the names in scope: `inputs`, `steps` (`{id: {"output", "status"}}`), and inside
            a foreach `item` and `index`. Values are plain JSON types.

    Returns:
        The value with each whole-value expression replaced by its result (type kept) and each
        interpolated string rendered as text.

    Raises:
        ExpressionError: an expression failed; the message names it and the problem.
    """
    activation = {name: celpy.json_to_cel(val) for name, val in context.items()}
    return _walk(value, activation)


def _walk(value: Any, activation: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return _render(value, activation) if OPEN in value else value
    if isinstance(value, Mapping):
        return {str(k): _walk(v, activation) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, activation) for v in value]
    return value


def _render(text: str, activation: dict[str, Any]) -> Any:
    whole = whole_expression(text)
    if whole is not None:
        return _run(whole, activation)
    out: list[str] = []
    for part in split_template(text):
        if isinstance(part, Expr):
            out.append(to_text(_run(part.source, activation)))
        else:
            out.append(part)
    return "".join(out)


def evaluate_expression(expr: str, context: Mapping[str, Any]) -> Any:
    """Evaluate one bare CEL expression (no `${{ }}`) and return a plain JSON value.

    Raises:
        ExpressionError: the expression does not parse or fails.
    """
    activation = {name: celpy.json_to_cel(val) for name, val in context.items()}
    return _run(expr, activation)


def _run(expr: str, activation: dict[str, Any]) -> Any:
    _, program = _compiled(expr)
    try:
        result = program.evaluate(activation)
    except CELEvalError as exc:
        raise ExpressionError(expr, _eval_problem(exc)) from None
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise ExpressionError(expr, str(exc) or type(exc).__name__) from None
    if isinstance(result, CELEvalError):
        raise ExpressionError(expr, _eval_problem(result))
    return to_json(result, expr)


def _eval_problem(exc: CELEvalError) -> str:
    text = str(exc.args[0]) if exc.args else "evaluation failed"
    if text.startswith("undeclared reference to"):
        text = text.split(" (in activation", 1)[0]
    elif text.startswith("found no matching overload"):
        types = [t.__name__.removesuffix("Type").lower() for t in _types_in(exc)]
        text = "no operator or function fits these operand types" + (
            f" ({', '.join(types)})" if types else ""
        )
    elif text.startswith("no such member in mapping"):
        text = text.replace("no such member in mapping", "no such key")
    elif text == "invalid_argument" and len(exc.args) > 1 and exc.args[1] is IndexError:
        text = "list index out of range"
    return text


def _types_in(exc: CELEvalError) -> list[type]:
    text = str(exc.args[0])
    names = [part.split("'")[0] for part in text.split("celtypes.")[1:]]
    return [getattr(celtypes, name) for name in names if hasattr(celtypes, name)]


def to_json(value: Any, expr: str = "") -> Any:
    """Convert a CEL result to plain Python JSON types (bool, int, float, str, list, dict, None).

    Raises:
        ExpressionError: the value has no JSON form (bytes, NaN, infinity).
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.TimestampType):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, celtypes.DurationType):
        return f"{value.total_seconds():g}s"
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ExpressionError(expr, f"the result {float(value)} has no JSON form")
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        sample = base64.b64encode(bytes(value[:12])).decode()
        raise ExpressionError(expr, f"the result is bytes (base64 {sample}...), which JSON cannot carry")
    if isinstance(value, Mapping):
        return {_key(k, expr): to_json(v, expr) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, expr) for v in value]
    raise ExpressionError(expr, f"the result of type {type(value).__name__} has no JSON form")


def _key(key: Any, expr: str) -> str:
    plain = to_json(key, expr)
    return plain if isinstance(plain, str) else json.dumps(plain)


def to_text(value: Any) -> str:
    """How a value reads when spliced into a string: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def evaluate_condition(condition: str | bool | None, context: Mapping[str, Any]) -> bool:
    """Evaluate a step's `if:`: a bare CEL expression or one `${{ }}`; absent means true.

    Raises:
        ExpressionError: the expression fails or its result is not a boolean.
    """
    if condition is None or isinstance(condition, bool):
        return condition is not False
    expr = condition_expression(condition)
    result = evaluate_expression(expr, context)
    if not isinstance(result, bool):
        raise ExpressionError(expr, f"if: must give true or false, got {to_text(result)}")
    return result


def condition_expression(condition: str) -> str:
    """The CEL text of an `if:` or `foreach:` string: `${{ x }}` gives `x`, a bare `x` stays `x`."""
    whole = whole_expression(condition)
    return whole if whole is not None else condition.strip()


def evaluate_foreach(foreach: str | list[Any], context: Mapping[str, Any]) -> list[Any]:
    """The list a step's `foreach:` runs over.

    Raises:
        ExpressionError: the expression fails or its result is not a list.
    """
    if isinstance(foreach, list):
        return [evaluate(v, context) for v in foreach]
    expr = condition_expression(foreach)
    result = evaluate_expression(expr, context)
    if not isinstance(result, list):
        raise ExpressionError(expr, f"foreach: must give a list, got {to_text(result)}")
    return result
