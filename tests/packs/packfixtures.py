"""Shared data of the pack-format tests: paths, the fixed key seed, the example manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ECHO_DIR = REPO / "examples" / "tools" / "echo"
DATA = HERE / "data"
KID = "com.example.tools#dev-2026-10"
# A fixed seed, so that signatures are golden vectors (Ed25519 signing is deterministic).
SEED = bytes(range(32))


def echo_manifest() -> dict[str, Any]:
    """The echo manifest with plausible archive numbers filled in (it passes every check)."""
    m = json.loads((ECHO_DIR / "b3pack.json").read_text())
    m["tool"]["bundle"]["archive"] = {
        "sha256": "a" * 64,
        "bytes": 10240,
        "format": "tar",
        "unpackedBytes": 2582,
        "entries": 2,
    }
    return m


def open_meteo_manifest() -> dict[str, Any]:
    """The declarative pack of the packs seed."""
    return json.loads((DATA / "open-meteo.json").read_text())
