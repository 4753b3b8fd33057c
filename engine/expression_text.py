"""The text of `${{ }}` expressions: finding them in strings, and the errors an expression raises.

Errors::

    ExpressionError            an expression could not be evaluated (names the expression)
     └── ExpressionSyntaxError an expression does not parse (line and column inside it)
    TooManyItems               a `foreach:` gave more items than a step runs over

engine.expressions compiles and evaluates what is found here (and names all of it for its callers).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError
from packs.templates import find_close

OPEN = "${{"
CLOSE = "}}"

#: The names an expression may read beside `inputs` and `steps`, and where.
FOREACH_NAMES = frozenset({"item", "index"})
STEP_FIELDS = frozenset({"output", "status"})

SHOWN_CHARS = 120
"""Messages show at most this many characters of an expression's text (and of a value)."""


def shown(text: str) -> str:
    """A text as a message shows it: cut at SHOWN_CHARS characters, with `...` when cut."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


class ExpressionError(EngineError):
    """An expression could not be evaluated.

    Attributes:
        expression: the CEL text (without `${{ }}`).
        problem: what went wrong, one sentence.
    """

    def __init__(self, expression: str, problem: str) -> None:
        self.expression = expression
        self.problem = problem
        super().__init__(f"${{{{ {shown(expression)} }}}}: {problem}")


class TooManyItems(EngineError):
    """A `foreach:` gave more items than a step may run over (its list was not converted: `count` says)."""

    def __init__(self, count: int, most: int) -> None:
        self.count = count
        super().__init__(
            f"foreach gives {count:,} items; a step runs at most {most:,}: "
            "split the list across steps or runs"
        )


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
