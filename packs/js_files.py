"""A pack's JavaScript files: which belong to its bundle, and the checks that need them.

The files under `js/` (ES modules `.js`/`.mjs` and `.json` data) are bundle files like fixtures, each
hashed by its path, so two builds of the same files are byte-identical. `check_js_files` runs the
checks the manifest alone cannot: each js action's entry is one of those files, it and every module it
imports parse as ES modules (imports only relative paths to files of the pack: no `node_modules`, no
`node:` builtins), and the entry exports the function the action names. The modules are parsed and
linked by Node.js (`probe.mjs`, nothing evaluated), in a process with a time and memory limit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from packs.checks_js import is_js_action
from packs.checks_util import actions_of
from packs.errors import Violation

JS_FILE_EXTENSIONS = (".js", ".mjs", ".json")
MAX_JS_FILES = 256
MAX_JS_BYTES = 4 << 20
PROBE = Path(__file__).with_name("js") / "probe.mjs"
PROBE_TIMEOUT_S = 20.0
NODE_BIN = "node"


def first_party_namespaces() -> tuple[str, ...]:
    """The operator's first-party namespaces besides io.b3os: `B3OS_FIRST_PARTY_NAMESPACES`, comma-separated
    (the api's setting of the same name decides at publish)."""
    raw = os.environ.get("B3OS_FIRST_PARTY_NAMESPACES", "")
    return tuple(n.strip() for n in raw.split(",") if n.strip())


def js_file_problem(rel: str, size: int) -> str | None:
    """Why a file under js/ cannot be part of the bundle, or None."""
    if not rel.endswith(JS_FILE_EXTENSIONS):
        return f"{rel} is not accepted under js/: the pack's code is .js and .mjs modules and .json data"
    if size > MAX_JS_BYTES:
        return f"{rel} has {size} bytes: a pack's js/ holds at most {MAX_JS_BYTES} bytes"
    return None


def check_js_files(
    manifest: Mapping[str, Any], files: Mapping[str, bytes], *, node_bin: str = NODE_BIN
) -> list[Violation]:
    """The violations of check 35 (entry, parse, export) for every js action of `manifest`.

    Args:
        manifest: the manifest (its js actions' impl passed checks 33).
        files: the bundle files by path; the code is those under js/.
        node_bin: the Node.js executable that parses the modules.
    """
    code = {p: b for p, b in files.items() if p.startswith("js/")}
    out: list[Violation] = []
    if len(code) > MAX_JS_FILES or sum(len(b) for b in code.values()) > MAX_JS_BYTES:
        total = sum(len(b) for b in code.values())
        out.append(
            _violation(
                "js",
                f"js/ holds {len(code)} files of {total} bytes: a pack's code is at most {MAX_JS_FILES} "
                f"files of {MAX_JS_BYTES} bytes in all",
            )
        )
        return out
    for p, a in actions_of(manifest):
        if not is_js_action(a):
            continue
        entry, export = a["impl"].get("entry"), a["impl"].get("export")
        field = f"{p}.impl.entry"
        if not isinstance(entry, str) or entry not in code:
            out.append(_violation(field, f"{field} {json.dumps(entry)} is not a file of the pack's js/"))
            continue
        answer = _probe(entry, code, node_bin)
        if "error" in answer:
            out.append(_violation(field, f"{field} {json.dumps(entry)} is not accepted: {answer['error']}"))
        elif export not in answer.get("exports", []):
            names = ", ".join(answer.get("exports", [])) or "nothing"
            out.append(
                _violation(
                    f"{p}.impl.export",
                    f"{p}.impl.export {json.dumps(export)} is not accepted: {entry} exports {names}",
                )
            )
    return out


def missing_entries(manifest: Mapping[str, Any], paths: Collection[str]) -> list[Violation]:
    """Check 35 where only the bundle's file list is known (the api at publish): each js action's entry
    is one of `paths`. The build and verify parse the files too (`check_js_files`)."""
    out = []
    for p, a in actions_of(manifest):
        entry = a["impl"].get("entry") if is_js_action(a) else None
        if is_js_action(a) and entry not in paths:
            field = f"{p}.impl.entry"
            out.append(_violation(field, f"{field} {json.dumps(entry)} is not a file of the pack's js/"))
    return out


def _violation(field: str, text: str) -> Violation:
    return Violation(check=35, field=field, message=f"check 35: {text}")


def _probe(entry: str, code: Mapping[str, bytes], node_bin: str) -> dict[str, Any]:
    """Node.js's parse of the modules `entry` reaches: {"exports": [...]} or {"error": sentence}."""
    texts: dict[str, str] = {}
    for path, data in code.items():
        if path.endswith((".js", ".mjs")):
            try:
                texts[path] = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                return {"error": f"{path} is not UTF-8 text (byte {exc.start})"}
    exe = shutil.which(node_bin)
    if exe is None:
        return {"error": f"Node.js ({node_bin}) is not installed here, so the code could not be parsed"}
    args = [
        exe,
        "--experimental-vm-modules",
        "--no-warnings",
        "--max-old-space-size=256",
        "--experimental-permission",
        f"--allow-fs-read={PROBE}",
        str(PROBE),
    ]
    request = json.dumps({"entry": entry, "files": texts}).encode()
    try:
        done = subprocess.run(args, input=request, capture_output=True, timeout=PROBE_TIMEOUT_S, env={})
    except subprocess.TimeoutExpired:
        return {"error": f"parsing the code took longer than {PROBE_TIMEOUT_S:g} s"}
    try:
        answer: dict[str, Any] = json.loads(done.stdout.decode("utf-8", "replace").splitlines()[-1])
    except (IndexError, ValueError):
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
        return {"error": f"the code could not be parsed: {why[0]}"}
    return answer


__all__ = [
    "JS_FILE_EXTENSIONS",
    "check_js_files",
    "first_party_namespaces",
    "js_file_problem",
    "missing_entries",
]
