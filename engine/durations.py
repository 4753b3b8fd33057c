"""Durations in the routine language: a whole number and a unit, `500ms`, `30s`, `2m` or `1h` (a step's
`timeout`, a retry's `backoff` and `max-backoff`). Standard library and pydantic only: the workflow
sandbox loads it with engine.routine.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import Field

DURATION_PATTERN = r"^[0-9]{1,9}(ms|s|m|h)$"
"""A duration: a whole number and a unit, `500ms`, `30s`, `2m`, `1h`."""

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_DURATION_RE = re.compile(DURATION_PATTERN)

Duration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        description="A duration: a whole number and a unit (ms, s, m, h), such as 500ms, 30s, 2m.",
        examples=["500ms", "30s", "2m"],
    ),
]


def duration_ms(text: str) -> int:
    """The milliseconds of a duration such as `500ms`, `30s`, `2m` or `1h`.

    Raises:
        ValueError: the text is not a duration; the sentence names it.
    """
    match = _DURATION_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: use a whole number and a unit, such as 500ms, 30s, 2m or 1h"
        )
    unit = match.group(1)
    return int(text[: -len(unit)]) * _UNITS_MS[unit]


def parse_duration(text: str) -> timedelta:
    """A duration such as `30s` as a timedelta.

    Raises:
        ValueError: the text is not a duration.
    """
    return timedelta(milliseconds=duration_ms(text))
