"""CEL's `matches()` with a bound on its work: RE2, whose time is linear in the text, but whose constant is
the size of the pattern's compiled program. `\\b(\\w+\\s?){1,1000}y` compiles to ~11,000 instructions and
takes seconds over 10 KB of text: enough to hold a workflow task past Temporal's deadlock timeout.

A match may cost at most `MATCH_COST` (program instructions times characters of text: ~50 ms here);
past it, or for a pattern RE2 refuses or whose program needs more than `MAX_PROGRAM_BYTES`, `matches()`
is an evaluation error with a sentence (the step fails `expression_failed`, naming it), before any
matching is done. Deterministic, no I/O (the workflow runs it).
"""

from __future__ import annotations

from typing import Any

import re2
from cachetools import LRUCache, cached
from celpy import celtypes
from celpy.evaluation import CELEvalError

MATCH_COST = 10_000_000
"""The most `matches()` may cost: the pattern's program size (instructions) times the text's length."""

MAX_PROGRAM_BYTES = 2 * 1024 * 1024
"""Memory RE2 may give one pattern's program (RE2's own default is 8 MiB); a larger pattern is refused."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = MAX_PROGRAM_BYTES


@cached(LRUCache(maxsize=64), key=lambda pattern: pattern)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else "RE2 refuses it"
        return why.decode(errors="replace") if isinstance(why, bytes) else str(why)


def matches(text: str, pattern: str) -> Any:
    """Whether RE2 finds `pattern` in `text`, or a `CELEvalError` saying why it was not tried."""
    compiled = _compiled(pattern)
    if isinstance(compiled, str):
        return CELEvalError(f"matches(): the pattern cannot be used: {compiled}", ValueError, ())
    cost = compiled.programsize * max(len(text), 1)
    if cost > MATCH_COST:
        return CELEvalError(
            f"matches(): a pattern of {compiled.programsize:,} instructions over {len(text):,} characters is "
            f"more work than one match may take ({MATCH_COST:,} instructions times characters): shorten the "
            "text or simplify the pattern",
            ValueError,
            (),
        )
    return celtypes.BoolType(compiled.search(text) is not None)
