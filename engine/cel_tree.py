"""What an expression reads and calls, read from its parse tree (cel-python's lark tree) without running it:
the names and member chains it reads (`references_of`), the variables its macros bind (`bound_names`), the
functions it calls (`functions_of`) and its status-function calls (`status_calls_of`). engine.expressions
keeps each expression's answers with its compiled form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy
import lark

from packs import cel_syntax

STATUS_FUNCTIONS = ("success", "failure", "always", "cancelled")
"""The status functions a step's `if:` may call (as GitHub Actions has them), each with no argument."""


@dataclass(frozen=True)
class Reference:
    """One `root.a.b` chain read by an expression: `root` and the member names after it."""

    root: str
    path: tuple[str, ...]


#: The functions and macros an expression may call: CEL's standard library as cel-python has it.
FUNCTIONS = frozenset(name for name in celpy.evaluation.base_functions if name[:1].isalpha()) | {
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
}


def functions_of(tree: lark.Tree) -> list[str]:
    found: list[str] = []
    for node in tree.iter_subtrees_topdown():
        if node.data == "ident_arg" and node.children:
            found.append(str(node.children[0]))
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            found.append(str(node.children[1]))
    return found


def bound_names(tree: lark.Tree) -> set[str]:
    """The variables macros bind (`n` in `names.map(n, ...)`)."""
    bound: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and len(node.children) >= 3:
            method, args = node.children[1], node.children[2]
            if str(method) in cel_syntax.MACROS and isinstance(args, lark.Tree) and args.children:
                name = _ident_of(args.children[0])
                if name:
                    bound.add(name)
    return bound


def references_of(tree: lark.Tree, bound: set[str]) -> list[Reference]:
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
            if isinstance(inner, lark.Tree) and inner.data in ("ident", "dot_ident"):
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


@dataclass(frozen=True)
class StatusCall:
    """One call of a status function in an expression: its name, and whether it is called as it must
    be (`success()`: no argument, no receiver)."""

    name: str
    well_formed: bool


def status_calls_of(tree: lark.Tree) -> list[StatusCall]:
    found: list[StatusCall] = []
    for node in tree.iter_subtrees_topdown():
        if node.data == "ident_arg" and node.children and str(node.children[0]) in STATUS_FUNCTIONS:
            found.append(StatusCall(str(node.children[0]), len(node.children) == 1))
        elif node.data == "member_dot_arg" and len(node.children) >= 2:
            if str(node.children[1]) in STATUS_FUNCTIONS:
                found.append(StatusCall(str(node.children[1]), False))
    return found
