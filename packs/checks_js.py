"""Publish checks of JavaScript actions (`impl.kind` "js"): 33 and 34, on the manifest alone.

A js action is code of the pack (ES modules under `js/`) run by the JS runtime on a node, reaching the
network only through the egress proxy. What needs the files themselves (the entry exists, parses and
exports the function) is `packs.js_files.check_js_files`, run by the build and by verify.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from packs.checks_util import Report, actions_of, missing_or

FIRST_PARTY = ("io.b3os",)
"""The namespaces whose packs may hold js actions whatever the operator lists (seed: first-party only)."""

JS_DIR = "js"
JS_EXTENSIONS = (".js", ".mjs")
# The entry: a path under js/ whose segments are bundle path segments, ending .js or .mjs.
_ENTRY_RE = re.compile(r"^js(/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){1,8}$")
_EXPORT_RE = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]{0,63}$")
_CODE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,59}$")  # a letter first: the node's answers take such codes
_ENTRY_HINT = 'use the path of a .js or .mjs file under js/, such as "js/index.js"'
_IMPL_FIELDS = ("kind", "entry", "export", "errors")
_ERROR_FIELDS = ("code", "message", "retryable")


def is_js_action(a: Mapping[str, Any]) -> bool:
    """Whether an action's impl is of kind "js"."""
    impl = a.get("impl")
    return isinstance(impl, Mapping) and impl.get("kind") == "js"


def check_js_impl(m: Mapping[str, Any], r: Report) -> None:
    for p, a in actions_of(m):
        if not is_js_action(a):
            continue
        impl = a["impl"]
        entry = impl.get("entry")
        if not isinstance(entry, str) or _ENTRY_RE.match(entry) is None or not entry.endswith(JS_EXTENSIONS):
            r.add(
                33,
                f"{p}.impl.entry",
                entry,
                missing_or("entry" in impl, _ENTRY_HINT),
            )
        export = impl.get("export")
        if not isinstance(export, str) or _EXPORT_RE.match(export) is None:
            r.add(
                33,
                f"{p}.impl.export",
                export,
                missing_or("export" in impl, 'use the name of the exported function, such as "run"'),
            )
        _check_errors(r, f"{p}.impl", impl.get("errors", []))
        for key in impl:
            if key not in _IMPL_FIELDS:
                r.add(33, f"{p}.impl.{key}", impl[key], "a js impl has only kind, entry, export and errors")
        for field in ("inputSchema", "outputSchema"):
            props = a.get(field, {}).get("properties") if isinstance(a.get(field), Mapping) else None
            for name, prop in (props or {}).items() if isinstance(props, Mapping) else ():
                if isinstance(prop, Mapping) and "x-b3os-file" in prop:
                    r.add(
                        33,
                        f"{p}.{field}.properties.{name}.x-b3os-file",
                        prop["x-b3os-file"],
                        "a js action takes and returns no files: pass data as JSON values",
                    )


def _check_errors(r: Report, p: str, errors: Any) -> None:
    if not isinstance(errors, list):
        r.add(33, f"{p}.errors", errors, 'use a list of {"code", "message"?, "retryable"?}')
        return
    seen: set[str] = set()
    for i, e in enumerate(errors):
        if not isinstance(e, Mapping) or "code" not in e:
            shape = 'use {"code": "not_found", "message"?: text, "retryable"?: false}'
            r.add(33, f"{p}.errors[{i}]", e, shape)
            continue
        code = e["code"]
        if not isinstance(code, str) or _CODE_RE.match(code) is None or code in seen:
            r.add(
                33,
                f"{p}.errors[{i}].code",
                code,
                'use a unique code of 1 to 60 lowercase letters, digits, "_" and "-", starting with a '
                'letter, such as "not_found"',
            )
        seen.add(str(code))
        message = e.get("message", "")
        if not isinstance(message, str) or len(message) > 500:
            r.add(33, f"{p}.errors[{i}].message", message, "use a text of at most 500 characters")
        if not isinstance(e.get("retryable", False), bool):
            r.add(33, f"{p}.errors[{i}].retryable", e["retryable"], "use true or false")
        for key in e:
            if key not in _ERROR_FIELDS:
                r.add(33, f"{p}.errors[{i}].{key}", e[key], "an error has only code, message and retryable")


def first_party_check(first_party: Collection[str]) -> Callable[[Mapping[str, Any], Report], None]:
    """Check 34 for the given first-party namespaces (`FIRST_PARTY` and the operator's)."""
    allowed = sorted({*FIRST_PARTY, *first_party})

    def check_first_party(m: Mapping[str, Any], r: Report) -> None:
        ns = str(m.get("pack", "")).partition("/")[0]
        if ns in allowed:
            return
        named = ", ".join(f'"{n}"' for n in allowed)
        for p, a in actions_of(m):
            if is_js_action(a):
                r.add(
                    34,
                    f"{p}.impl.kind",
                    "js",
                    f"js actions are published by first-party namespaces only ({named}); "
                    'write the action as "http"',
                )

    return check_first_party


JS_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (check_js_impl,)

__all__ = ["FIRST_PARTY", "JS_CHECKS", "JS_DIR", "first_party_check", "is_js_action"]
