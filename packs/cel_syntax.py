"""The shape an expression may have: caps on its length, nesting and macros, checked when it compiles.

- `MAX_EXPRESSION_CHARS` (2,000) characters in one `${{ }}` expression;
- `MAX_FIELD_EXPRESSION_CHARS` (8,000) characters in the expressions of one field (a step's `with:`,
  `if:` or `foreach:`, or the routine's `outputs`), checked by the validator;
- `MAX_ROUTINE_EXPRESSION_CHARS` (32,000) characters in the expressions of one routine, checked by the
  validator before any of them is parsed (a list literal of 2,000 characters takes ~0.2 s to parse:
  the expressions of one routine take at most a few seconds);
- `MAX_MANIFEST_EXPRESSION_CHARS` (32,000) characters in the request and response templates' expressions
  of one pack manifest, checked by publish check 32 before any of them is parsed, for the same reason;
- `MAX_NESTING` (32) levels of operators, calls, member reads, indexes and brackets inside one another;
- `MAX_MACRO_NESTING` (3) macros (`map`, `filter`, `all`, `exists`, `exists_one`) inside one another.

`1 + 1 + 1` nests 2 levels (`+` reads left to right: `(1 + 1) + 1`), `f(g(x))` 2, `((x))` 2,
`a.b.c` 2, `[[1]]` 2. The length is checked before the text is parsed, so a huge expression costs
nothing; the parse of the longest one allowed takes a few tens of milliseconds.

`runnable(tree)` is the parse tree the evaluator walks: cel-python's grammar wraps every operand in up
to nine one-child rules (`expr > conditionalor > ... > member > primary`), each a step of the
interpreter; they are dropped, which halves the work of an evaluation and its recursion depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import lark

MAX_EXPRESSION_CHARS = 2_000
MAX_FIELD_EXPRESSION_CHARS = 8_000
MAX_ROUTINE_EXPRESSION_CHARS = 32_000
MAX_MANIFEST_EXPRESSION_CHARS = 32_000
MAX_NESTING = 32
MAX_MACRO_NESTING = 3

MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})

# Rules that are one nesting level whatever their children; and binary or unary operators, which are
# one level when they have their operands (two children), and a pass-through otherwise.
_LEVELS = frozenset(
    {
        "member_dot",
        "member_dot_arg",
        "member_index",
        "paren_expr",
        "list_lit",
        "map_lit",
        "ident_arg",
        "dot_ident_arg",
    }
)
_OPERATORS = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary"}
)
_PASS_THROUGH = _OPERATORS | {"member"}


@dataclass(frozen=True)
class ShapeProblem:
    """Why an expression's shape is refused, and the 0-based offset in its text where it shows."""

    problem: str
    offset: int


def length_problem(expr: str) -> ShapeProblem | None:
    """The problem of an expression longer than MAX_EXPRESSION_CHARS, else None."""
    if len(expr) <= MAX_EXPRESSION_CHARS:
        return None
    return ShapeProblem(
        f"the expression has {len(expr):,} characters, more than the {MAX_EXPRESSION_CHARS:,} one "
        "expression may have: split it across steps or fields",
        MAX_EXPRESSION_CHARS,
    )


def tree_problem(tree: lark.Tree) -> ShapeProblem | None:
    """The first nesting or macro problem of a parse tree, else None (walked without recursion)."""
    stack: list[tuple[lark.Tree, int, int]] = [(tree, 0, 0)]
    while stack:
        node, levels, macros = stack.pop()
        kind = node.data
        if kind in _LEVELS or (kind in _OPERATORS and len(node.children) > 1):
            levels += 1
            if levels > MAX_NESTING:
                return ShapeProblem(
                    f"the expression nests more than {MAX_NESTING} levels of operators, calls, member reads "
                    "and brackets: split it across steps or fields",
                    _offset(node),
                )
        if kind == "member_object":
            return ShapeProblem("message construction (Type{field: value}) is not supported", _offset(node))
        if kind == "member_dot_arg" and len(node.children) > 1 and str(node.children[1]) in MACROS:
            macros += 1
            if macros > MAX_MACRO_NESTING:
                return ShapeProblem(
                    f"the expression nests more than {MAX_MACRO_NESTING} macros (map, filter, all, exists, "
                    "exists_one) inside one another",
                    _offset(node),
                )
        for child in node.children:
            if isinstance(child, lark.Tree):
                stack.append((child, levels, macros))
    return None


def _offset(node: lark.Tree) -> int:
    return int(getattr(node.meta, "start_pos", 0) or 0)


def runnable(tree: lark.Tree) -> lark.Tree:
    """A copy of the parse tree without its one-child pass-through rules (see the module docstring), rule
    names as plain strings.

    Every evaluator method of those rules returns its only child's value, so the result is the same.
    """
    done: dict[int, lark.Tree] = {}
    stack: list[tuple[lark.Tree, bool]] = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if not children_done:
            stack.append((node, True))
            stack.extend((c, False) for c in node.children if isinstance(c, lark.Tree))
            continue
        children = [done.pop(id(c)) if isinstance(c, lark.Tree) else c for c in node.children]
        if node.data in _PASS_THROUGH and len(children) == 1 and isinstance(children[0], lark.Tree):
            done[id(node)] = children[0]
        else:
            # a rule's name as a plain str: lark's Token compares in Python, at every dispatch
            done[id(node)] = lark.Tree(str(node.data), children, node.meta)
    return done[id(tree)]
