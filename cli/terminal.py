"""What the CLI writes is text a terminal shows, never commands it obeys.

Answers carry text from tools, upstream services and other people's packs: an escape sequence in a
tool's error message must not move the cursor, retitle the window or rewrite earlier lines of the
caller's terminal. `safe_streams()` wraps stdout and stderr for one command so that every control
character but newline and tab (C0, DEL, C1) and every bidirectional override (the "Trojan Source"
characters) is written as its `\\uXXXX` escape. The escape is JSON's own, so `--json` output stays valid
JSON that decodes to the same values.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` with every control and bidirectional-override character written as `\\uXXXX`."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeStream:
    """A text stream that writes `clean(text)` to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean(text))
        return len(text)

    def writelines(self, lines: Iterator[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:  # flush, isatty, fileno, encoding, ...
        return getattr(self._stream, name)


@contextmanager
def safe_streams() -> Iterator[None]:
    """Wrap `sys.stdout` and `sys.stderr` in `SafeStream` for the duration (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout = SafeStream(saved[0])  # type: ignore[assignment]
    sys.stderr = SafeStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
