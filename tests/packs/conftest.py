"""Fixtures of the pack-format tests: a fixed signing key, key directories, pack copies."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packfixtures import ECHO_DIR, SEED, echo_manifest


@pytest.fixture
def echo() -> dict[str, Any]:
    return copy.deepcopy(echo_manifest())


@pytest.fixture
def fixed_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(SEED)


@pytest.fixture
def keys_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty key directory, also set as $B3OS_KEYS_DIR."""
    d = tmp_path / "keys"
    monkeypatch.setenv("B3OS_KEYS_DIR", str(d))
    return d


@pytest.fixture
def echo_copy(tmp_path: Path) -> Path:
    """A copy of examples/tools/echo (without any earlier build output)."""
    dest = tmp_path / "echo"
    shutil.copytree(ECHO_DIR, dest, symlinks=True, ignore=shutil.ignore_patterns(".b3os-build"))
    return dest
