"""Helpers of the node tests: tool packs, installs into the cache, call builders."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from node.cache import InstallCache
from node.models import NodeCall
from packs.archive import build_archive

REPO = Path(__file__).resolve().parents[2]
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool"
HOSTILE = Path(__file__).resolve().parent / "tools"
ECHO = "com.example.tools/echo"
VERSION = "1.0.0"


def install_tree(cache: InstallCache, pack: str, tree: Path, version: str = VERSION) -> Path:
    """Install a tool tree into the cache the way sync does: through its deterministic archive."""
    data, stats = build_archive(tree)
    return cache.install_archive(
        pack, version, data, fmt="tar", max_unpacked_bytes=stats.unpacked_bytes, max_entries=stats.entries
    )


def echo_call(action: str, input_: dict[str, Any], *, timeout_ms: int = 10_000, **kw: Any) -> NodeCall:
    """A call of one action of the echo tool."""
    return NodeCall(
        call_id=f"tcall_{action}_{time.monotonic_ns()}",
        pack=ECHO,
        version=VERSION,
        action=action,
        cmd=["/tool/bin/echo-tool", action],
        timeout_ms=timeout_ms,
        input=input_,
        file_fields=["file"] if "file" in input_ else [],
        **kw,
    )
