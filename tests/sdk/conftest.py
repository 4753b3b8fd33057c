"""Fixtures of the SDK tests: the session's one real stack (tests/realstack.py: two api processes, a node,
the egress proxy in front of HTTPS stand-ins, Temporal and a routine worker), shared to start it once; and
the TypeScript SDK, built."""

from __future__ import annotations

from pathlib import Path

import pytest
from realstack import RoutineStack

from .typescript_sdk import build, install


@pytest.fixture(scope="session")
def stack(routine_stack: RoutineStack) -> RoutineStack:
    return routine_stack


@pytest.fixture(scope="session")
def typescript_sdk() -> Path:
    """`sdk/typescript`, its dependencies installed and built (tests/sdk/typescript_sdk.py)."""
    return build()


@pytest.fixture(scope="session")
def typescript_tools() -> Path:
    """`sdk/typescript` with its dev dependencies (tsc, openapi-typescript) installed."""
    return install()
