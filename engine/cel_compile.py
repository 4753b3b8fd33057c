"""Compiling `${{ }}` expressions with cel-python, and the compiled expressions kept for reuse.

An expression is checked against packs.cel_syntax's caps (its length, then its tree's shape) as it
compiles, and what it reads and calls is found once, from its tree (engine.cel_tree). Compiled
expressions are cached by their text, the most recently used up to CACHE_CHARACTERS characters of text
in all. Deterministic, no I/O: it is passed through into the Temporal workflow sandbox with
engine.expressions, whose names callers use.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import celpy
import lark
from cachetools import LRUCache, cached

from engine import cel_tree
from engine.cel_tree import Reference, StatusCall
from engine.expression_text import ExpressionSyntaxError
from packs import cel_syntax

CACHE_CHARACTERS = 16_000
"""Compiled expressions kept, counted by the characters of their text (least recently used first out):
a parse tree takes up to ~2 KB of memory per character of its text (a 2,000-character list literal,
~4 MB), so the cache holds at most a few tens of megabytes, and about 500 expressions of 30 characters."""


@dataclass(frozen=True)
class Compiled:
    """One compiled expression: the tree the evaluator walks, and what the expression reads and calls."""

    tree: lark.Tree
    references: tuple[Reference, ...]
    functions: tuple[str, ...]
    reads: tuple[tuple[str, str | None], ...]
    status_calls: tuple[StatusCall, ...]
    size: int  # the characters of its text: what it weighs in the cache


_env: celpy.Environment | None = None
_parser_lock = threading.Lock()  # cel-python's parser is not thread-safe
_programs: LRUCache[str, Compiled] = LRUCache(maxsize=CACHE_CHARACTERS, getsizeof=lambda c: c.size)


def _environment() -> celpy.Environment:
    global _env
    if _env is None:
        _env = celpy.Environment()
    return _env


@cached(_programs, key=lambda expr: expr, lock=threading.Lock())
def compiled(expr: str) -> Compiled:
    """The expression compiled (from the cache when it was compiled before).

    Raises:
        ExpressionSyntaxError: it does not parse, or passes a cap of packs.cel_syntax.
    """
    too_long = cel_syntax.length_problem(expr)
    if too_long is not None:
        raise _shape_error(expr, too_long)
    with _parser_lock:
        try:
            tree = _environment().compile(expr)
        except celpy.CELParseError as exc:
            raise _syntax_error(expr, exc) from None
    shape = cel_syntax.tree_problem(tree)
    if shape is not None:
        raise _shape_error(expr, shape)
    bound = cel_tree.bound_names(tree)
    refs = tuple(cel_tree.references_of(tree, bound))
    # A name a macro binds may also be read free elsewhere in the expression: read it whole then.
    reads = [(r.root, r.path[0] if r.path else None) for r in refs] + [(name, None) for name in sorted(bound)]
    return Compiled(
        tree=cel_syntax.runnable(tree),
        references=refs,
        functions=tuple(cel_tree.functions_of(tree)),
        reads=tuple(dict.fromkeys(reads)),
        status_calls=tuple(cel_tree.status_calls_of(tree)),
        size=max(len(expr), 1),
    )


def _shape_error(expr: str, shape: cel_syntax.ShapeProblem) -> ExpressionSyntaxError:
    before = expr[: shape.offset]
    line = before.count("\n") + 1
    column = shape.offset - (before.rfind("\n") + 1) + 1
    return ExpressionSyntaxError(expr, shape.problem, line, column, shape.offset)


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
