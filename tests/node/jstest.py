"""Helpers of the JS runtime's node tests: the test pack's code installed as a js pack, call builders."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from node.cache import InstallCache
from node.models import NodeCall

JS_CODE = Path(__file__).resolve().parent / "jspack"
JS_PACK = "io.b3os/js-test"
VERSION = "1.0.0"
ERRORS = [{"code": "not_found"}, {"code": "rate_limited", "retryable": True}]


def install_js(cache: InstallCache) -> Path:
    """Install tests/node/js/** as the js pack io.b3os/js-test 1.0.0, the way sync does."""
    files = {f"js/{p.relative_to(JS_CODE).as_posix()}": p.read_bytes() for p in JS_CODE.rglob("*.js")}
    return cache.install_files(JS_PACK, VERSION, files, {"pack": JS_PACK, "version": VERSION})


def js_call(
    export: str,
    input_: dict[str, Any] | None = None,
    *,
    timeout_ms: int = 10_000,
    grant: str = "",
    connections: dict[str, dict[str, Any]] | None = None,
) -> NodeCall:
    """A call of one export of tests/node/js/hostile.js."""
    return NodeCall(
        call_id=f"tcall_js_{export}_{time.monotonic_ns()}",
        pack=JS_PACK,
        version=VERSION,
        action=export,
        timeout_ms=timeout_ms,
        input=input_ or {},
        js={
            "entry": "js/hostile.js",
            "export": export,
            "errors": ERRORS,
            "connections": connections or {},
            "grant": grant,
        },
    )
