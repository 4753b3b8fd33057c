"""What makes the test session independent of the machine it runs on (tests/conftest.py applies it).

`make run` leaves `.b3os/dev.env` in the checkout, and the CLI falls back to it when B3OS_API_URL and
B3OS_API_KEY are unset; `~/.b3os` holds the caller's signing keys and node cache; the caller's shell may
export B3OS_* settings. None of them may reach a test: a fresh clone must pass `make run` then `make test`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

KEPT_PREFIX = "B3OS_TEST_"
"""Knobs meant for the test suite itself (such as B3OS_TEST_PG_BIN) stay."""

OTHER_SETTINGS = ("DATABASE_URL",)
"""Settings the api reads without the B3OS_ prefix."""


@contextmanager
def hermetic(root: Path) -> Iterator[Path]:
    """Run the block as on a fresh machine; every change is undone at its end.

    Removes every B3OS_* variable (but B3OS_TEST_*) and DATABASE_URL from the environment, points the
    HOME-relative state (the signing keys `B3OS_KEYS_DIR`, the node's install cache `B3OS_CACHE_DIR`) at new
    directories under `root`, and makes an empty directory under `root` the working directory, so that no
    relative `.b3os/` (the CLI's dev.env, the api's default data dir) is the checkout's. The node's base
    template (`~/.b3os/base`) stays where it is: a machine-wide build cache, made once and reused.

    Args:
        root: An empty directory to hold the keys, the cache and the working directory.

    Yields:
        The working directory.
    """
    work = root / "cwd"
    for sub in (work, root / "keys", root / "node-cache"):
        sub.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if (name.startswith("B3OS_") and not name.startswith(KEPT_PREFIX)) or name in OTHER_SETTINGS:
                mp.delenv(name)
        mp.setenv("B3OS_KEYS_DIR", str(root / "keys"))
        mp.setenv("B3OS_CACHE_DIR", str(root / "node-cache"))
        mp.chdir(work)
        yield work
