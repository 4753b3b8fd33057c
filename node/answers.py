"""A tool's answer: the last line of its stdout, read by the protocol (docs/node.md, Outcomes).

`{"output": {...}}` or `{"error": {"code", "message", "retryable"?}}`, one JSON object; anything else, an
error code that is no short name, or an answer that cannot travel on as JSON (nested past
`MAX_ANSWER_DEPTH`, or text that is not Unicode) is `tool_failed` / `protocol`. A tool's own error message
reaches callers cleaned of control characters and cut at `MAX_TOOL_MESSAGE` (`clean_message`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from node.models import NodeCallError

TOOL_CODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
MAX_TOOL_MESSAGE = 1000  # characters of a tool's own error message that reach the caller
MAX_ANSWER_DEPTH = 64  # as request bodies and run payloads (api.jsonbody, engine.payloads)
_CONTROL = dict.fromkeys(
    [
        *range(0x00, 0x20),
        0x7F,
        *range(0x80, 0xA0),
        # invisible marks that reorder or hide what a terminal shows: bidirectional overrides and
        # isolates, zero-width characters, the byte order mark
        0x061C,
        *range(0x200B, 0x2010),
        *range(0x202A, 0x202F),
        *range(0x2060, 0x2065),
        *range(0x2066, 0x206A),
        0xFEFF,
    ],
    " ",
)


def fail(code: str, reason: str | None, message: str, **details: Any) -> NodeCallError:
    """A call's error as the node answers it."""
    return NodeCallError(code=code, reason=reason, message=message, **details)


def clean_message(text: str) -> str:
    """A tool's error message as callers get it: control characters (escape sequences, line breaks) and
    invisible marks (bidirectional overrides, zero-width characters)
    turned into spaces, at most MAX_TOOL_MESSAGE characters (cut ones end with '…')."""
    flat = text.translate(_CONTROL).strip()
    return flat if len(flat) <= MAX_TOOL_MESSAGE else flat[: MAX_TOOL_MESSAGE - 1] + "…"


def parse_answer(stdout: bytes) -> tuple[dict[str, Any], NodeCallError | None]:
    """The tool's answer from its stdout (its error message cleaned), or the protocol failure it is."""
    last = stdout.rstrip(b"\r\n").rsplit(b"\n", 1)[-1]
    bad = fail(
        "tool_failed",
        "protocol",
        'the last line of the tool\'s stdout is not one JSON answer ({"output": ...} or {"error": ...})',
    )
    try:
        answer = json.loads(last)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past the parser
        return {}, bad
    if not _carriable(answer):
        return {}, fail(
            "tool_failed",
            "protocol",
            f"the tool's answer cannot travel as JSON: it nests lists and objects deeper than "
            f"{MAX_ANSWER_DEPTH} levels, or holds text that is not Unicode (a lone surrogate such as "
            "\\ud800)",
        )
    if not isinstance(answer, dict) or len(answer) != 1:
        return {}, bad
    if isinstance(answer.get("output"), dict):
        return answer, None
    err = answer.get("error")
    if (
        isinstance(err, dict)
        and isinstance(err.get("code"), str)
        and isinstance(err.get("message"), str)
        and isinstance(err.get("retryable", False), bool)
    ):
        if TOOL_CODE_RE.match(err["code"]) is None:
            return {}, fail(
                "tool_failed",
                "protocol",
                "the tool's error code is not a short name (a letter, then up to 63 letters, digits, "
                "'_', '.' or '-')",
            )
        return {
            "error": {
                "code": err["code"],
                "message": clean_message(err["message"]),
                "retryable": err.get("retryable", False),
            }
        }, None
    return {}, bad


def _carriable(answer: Any) -> bool:
    """Whether a tool's parsed answer can travel on as JSON: nested at most `MAX_ANSWER_DEPTH` levels
    (checked without recursion) and Unicode text only (no lone surrogate: `json.loads` takes one from an
    escape)."""
    stack: list[tuple[Any, int]] = [(answer, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_ANSWER_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in children)
    try:
        json.dumps(answer, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True
