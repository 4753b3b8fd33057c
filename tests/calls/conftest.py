"""Fixtures of the call tests: the session's one real stack (tests/realstack.py: two api processes, one
node, the echo packs; also the routine tests' Temporal and worker), shared to start it once."""

from __future__ import annotations

import pytest
from realstack import RoutineStack

from .stack import Stack


@pytest.fixture(scope="session")
def stack(routine_stack: RoutineStack) -> Stack:
    return routine_stack
