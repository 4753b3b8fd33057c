"""Schedules of a routine: the checks of a cron expression, a timezone and an overlap policy.

One module for the three places that take a schedule: a routine file's `on: {schedule: [...]}`
(engine.validate), `POST /v1/routines/{name}/schedules` (api.schedules.service) and the CLI. A cron
expression has five fields (minute, hour, day of month, month, day of week), each `*`, a number, a
range `a-b` (a <= b), a step `*/n`, `a/n` or `a-b/n` (1 <= n <= the field's span), or a list of those;
months and days may be named (`JAN`, `MON`). These are the rules of Temporal's own parser, which takes
the expression when the schedule is created (it refuses `59-0`, `sat-sun`, a step of 0 or one past 32
bits), so an expression checked here is one Temporal takes. The timezone is an IANA name
(`Europe/Paris`, default `UTC`).

Standard library only (the routine model imports the names below and the workflow sandbox loads it).
"""

from __future__ import annotations

import re
import zoneinfo
from typing import Literal

Overlap = Literal["skip", "buffer_one", "allow_all"]
"""What a schedule does when a run is due while its previous run still runs: skip the new one (the
default), run it once the previous one has ended (at most one waits), or run both."""

_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
    ),
    ("day of week", 0, 7, {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}),
)
_PART = re.compile(r"^(\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/([0-9]+))?$")


class ScheduleError(ValueError):
    """A schedule's value is refused; `field` names it (`cron`, `timezone`, `overlap`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def check_cron(cron: str) -> str:
    """The cron expression, stripped, when it is one this b3os runs.

    Raises:
        ScheduleError: the sentence names the expression and the field that is wrong.
    """
    text = cron.strip() if isinstance(cron, str) else ""
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            "cron",
            f"cron {cron!r} has {len(fields)} field(s); it needs 5: minute hour day-of-month month "
            "day-of-week, such as '0 7 * * 1-5'",
        )
    for value, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in value.split(","):
            problem = _part_problem(part, low, high, names)
            if problem:
                raise ScheduleError("cron", f"cron {cron!r}: the {name} field {value!r} {problem}")
    return " ".join(fields)


def _part_problem(part: str, low: int, high: int, names: dict[str, int]) -> str | None:
    match = _PART.match(part)
    if match is None:
        return "is not *, a number, a range a-b or a step */n"
    span, step = match.group(1), match.group(2)
    if step is not None and not 1 <= int(step) <= high - low + 1:
        return f"has a step of {step}: a step is 1 to {high - low + 1}"
    if span == "*":
        return None
    numbers: list[int] = []
    for bound in span.split("-"):
        number = names.get(bound.upper()) if not bound.isdigit() else int(bound)
        if number is None:
            return f"names {bound!r}, which is not a number" + (
                f" nor one of {', '.join(names)}" if names else ""
            )
        if not low <= number <= high:
            return f"has {bound}, outside {low}-{high}"
        numbers.append(number)
    if len(numbers) == 2 and numbers[1] < numbers[0]:
        split = f"{numbers[0]}-{high},{low}-{numbers[1]}"
        return f"has the range {span}, which ends before it starts: write it as two, {split}"
    return None


def check_timezone(timezone: str) -> str:
    """The timezone when it is an IANA name this machine knows (`Europe/Paris`, `UTC`).

    Raises:
        ScheduleError: the sentence names the value.
    """
    try:
        if not isinstance(timezone, str) or not timezone or timezone.startswith(("/", ".")):
            raise ValueError(timezone)
        zoneinfo.ZoneInfo(timezone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        raise ScheduleError(
            "timezone", f"timezone {timezone!r} is not an IANA timezone name such as 'Europe/Paris' or 'UTC'"
        ) from None
    return timezone
