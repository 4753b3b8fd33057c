"""The JS runtime on a node: Node.js and the harness, laid under a js pack's files at /tool in the VM.

Node.js (`/usr/bin/node`, the Debian package the host has; the base template's libraries are the ones
it links) is hard-linked (copied when the cache is on another file system) with `harness.mjs` into
`<cache>/.js-runtime/`, the lower layer of a js call's `/tool` overlay: the VM sees `/tool/node`,
`/tool/harness.mjs` and the pack's `/tool/js/...`. Each call is a fresh `node` process in a fresh VM,
with Node's permission model on top of the VM's isolation: it reads only `/tool`, and may start no
process, worker or addon.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from node.errors import NodeError

NODE_BIN = Path("/usr/bin/node")
HARNESS = Path(__file__).with_name("harness.mjs")
RUNTIME_DIR = ".js-runtime"
MIN_NODE_MAJOR = 20  # the permission model (--experimental-permission) came with Node.js 20
HEAP_MB = 384  # of the VM's 512 MiB: the rest is Node's own (code, buffers) before the cgroup kills it


class JsRuntimeError(NodeError):
    """The JS runtime could not be laid out on this node; the message says why."""


def js_cmd() -> list[str]:
    """The command a js call runs in its VM."""
    return [
        "/tool/node",
        f"--max-old-space-size={HEAP_MB}",
        "--experimental-permission",
        "--allow-fs-read=/tool/",
        "--disallow-code-generation-from-strings",
        "--no-warnings",
        "/tool/harness.mjs",
    ]


def _version(node_bin: Path) -> int:
    """The major version of a Node.js executable (0 when it does not say)."""
    try:
        done = subprocess.run(
            [str(node_bin), "--version"], capture_output=True, text=True, timeout=10, env={}
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = re.match(r"^v(\d+)\.", done.stdout.strip())
    return int(match.group(1)) if match else 0


def prepare_runtime(cache_root: Path, node_bin: Path = NODE_BIN) -> Path:
    """Lay out (or reuse) the runtime directory under `cache_root` and return it.

    Raises:
        JsRuntimeError: Node.js is not installed, or the files could not be written.
    """
    if not node_bin.is_file():
        raise JsRuntimeError(f"{node_bin} is missing: js actions need Node.js (the nodejs package)")
    version = _version(node_bin)
    if version < MIN_NODE_MAJOR:
        raise JsRuntimeError(
            f"{node_bin} is Node.js {version}: js actions need {MIN_NODE_MAJOR} or later "
            "(its permission model)"
        )
    stat = node_bin.stat()
    tag = hashlib.sha256(f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    tag += hashlib.sha256(HARNESS.read_bytes()).hexdigest()[:12]
    root = cache_root / RUNTIME_DIR / tag
    if (root / "harness.mjs").is_file():
        return root
    try:
        tmp = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True, mode=0o755)
        for path in (cache_root / RUNTIME_DIR, tmp):
            os.chmod(path, 0o755)
        try:
            os.link(node_bin, tmp / "node")
        except OSError:
            shutil.copy2(node_bin, tmp / "node")
        shutil.copyfile(HARNESS, tmp / "harness.mjs")
        os.chmod(tmp / "harness.mjs", 0o644)
        try:
            os.rename(tmp, root)
        except OSError:  # another node laid it out first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        raise JsRuntimeError(f"the JS runtime could not be laid out in {root}: {exc.strerror}") from exc
    return root
