"""Fixtures of the activity tests: the stand-in api (see stand_in_api.py: temporary)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stand_in_api import StandInApi


@pytest.fixture
def stand_in() -> Iterator[StandInApi]:
    api = StandInApi().start()
    yield api
    api.stop()
