"""`${{ }}` templates of declarative actions, as the publish checks read them.

A template is text with CEL expressions inside `${{ }}`. This module splits one the way
`engine.expressions.split_template` does (a `}}` inside a CEL string literal or map does not close
it) and parses each expression with cel-python directly: the `packs` package does not import
`engine`. It never evaluates anything. Expressions have the caps of `packs.cel_syntax`, as routines' do.
"""

from __future__ import annotations

import threading

import celpy

from packs import cel_syntax
from packs.errors import ManifestError

OPEN = "${{"
CLOSE = "}}"
#: What `skeleton` puts in place of each expression: a character no URL or header may hold.
MARK = "\x00"

_lock = threading.Lock()
_env: celpy.Environment | None = None


class TemplateError(ManifestError):
    """A text's `${{` is not closed, or it holds an empty expression; the message says which."""


def parts(text: str) -> list[tuple[bool, str]]:
    """Split a text into `(is_expression, text)` pieces, in order; an expression's CEL text is stripped.

    Raises:
        TemplateError: a `${{` has no matching `}}`, or an expression is empty.
    """
    out: list[tuple[bool, str]] = []
    pos = 0
    while (start := text.find(OPEN, pos)) >= 0:
        if start > pos:
            out.append((False, text[pos:start]))
        inner = start + len(OPEN)
        close = find_close(text, inner)
        if close < 0:
            raise TemplateError('its "${{" is not closed by "}}"')
        source = text[inner:close].strip()
        if not source:
            raise TemplateError('it holds an empty "${{ }}"')
        out.append((True, source))
        pos = close + len(CLOSE)
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def find_close(text: str, i: int) -> int:
    """Index of the `}}` closing an expression that starts at `i`, skipping string literals and maps
    (-1 when none does). The routine engine splits its templates with it too."""
    depth = 0
    quote: str | None = None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
        elif ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        elif ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0 and text.startswith(CLOSE, i):
                return i
            depth = max(0, depth - 1)
        i += 1
    return -1


def is_single_expression(text: object) -> bool:
    """Whether `text` is exactly one `${{ expr }}` (blanks aside).

    A text that starts with `${{` but does not split counts as one, so that the caller's shape check
    stays quiet and the syntax check names the problem once.
    """
    if not isinstance(text, str):
        return False
    stripped = text.strip()
    try:
        pieces = parts(stripped)
    except TemplateError:
        return stripped.startswith(OPEN)
    return len(pieces) == 1 and pieces[0][0]


def skeleton(text: str) -> str:
    """The text with each expression replaced by `MARK` (the text itself when it does not split)."""
    try:
        return "".join(MARK if is_expr else piece for is_expr, piece in parts(text))
    except TemplateError:
        return text


def cel_problem(source: str) -> str | None:
    """Why a CEL expression is refused ("syntax error at line 1, column 7", or a cap of
    `packs.cel_syntax` that routines' expressions have too: length, nesting, macros), or None."""
    global _env
    shape = cel_syntax.length_problem(source)
    if shape is None:
        with _lock:  # the lark parser behind an Environment is not shared across threads safely
            if _env is None:
                _env = celpy.Environment()
            try:
                tree = _env.compile(source)
            except celpy.CELParseError as exc:
                return f"syntax error at line {exc.line or 1}, column {exc.column or 1}"
        shape = cel_syntax.tree_problem(tree)
    return None if shape is None else shape.problem
