"""The one Retry-After parser: delay-seconds and HTTP dates."""

from __future__ import annotations

import email.utils

import pytest

from b3os import retry_after_seconds

NOW = 1_790_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 1 ", 1.0), ("1.5", 1.5), ("0", 0.0), ("-3", 0.0), ("120", 120.0)],
)
def test_delay_seconds_are_read_as_they_are(value: str, seconds: float) -> None:
    assert retry_after_seconds(value) == seconds


def test_an_http_date_is_the_seconds_until_it() -> None:
    assert retry_after_seconds(email.utils.formatdate(NOW + 30, usegmt=True), now=NOW) == 30.0
    assert retry_after_seconds("Thu, 01 Jan 1970 00:00:00 GMT", now=NOW) == 0.0  # past: at once


@pytest.mark.parametrize("value", [None, "", "  ", "soon", "nan", "inf", "Mon, 99 Foo 2026"])
def test_what_is_neither_a_number_nor_a_date_is_none(value: str | None) -> None:
    assert retry_after_seconds(value) is None
