"""Fixtures of the SDK tests: the session's one real stack (tests/realstack.py: two api processes, a node,
the egress proxy in front of HTTPS stand-ins, Temporal and a routine worker), shared to start it once."""

from __future__ import annotations

import pytest
from realstack import RoutineStack


@pytest.fixture(scope="session")
def stack(routine_stack: RoutineStack) -> RoutineStack:
    return routine_stack
