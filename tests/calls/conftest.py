"""Fixtures of the call tests: one real stack (two api processes, one node) for the session."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .stack import Stack, start_stack


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    root = Path(tempfile.mkdtemp(prefix="b3os-calls-"))
    s = start_stack(root)
    yield s
    s.stop()
