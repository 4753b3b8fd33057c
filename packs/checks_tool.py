"""Publish checks 13 to 23: what a tool pack may declare (13 to 20 are the values this version refuses)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from packs.archive import MAX_ENTRIES, MAX_PACKED_BYTES, MAX_UNPACKED_BYTES
from packs.checks_util import Report, actions_of, is_tool_pack, missing_or, render, same
from packs.names import is_file_name
from packs.semver import CaretRange

TOOL_FIELDS = ("kind", "base", "size", "bundle", "runtime", "network", "upstream", "notices")
REFUSED_FEATURES = {
    "sessions": "every call runs in a fresh VM; sessions that keep a VM between calls are not there yet",
    "setup": "the archive is the tool's whole install; put the files under tool/ instead of a setup step",
    "image": "tools built from an image are not there yet; put the files under tool/ "
    'on tool.base {"name": "base"}',
    "formats": 'the archive\'s one format is tool.bundle.archive.format, "tar" or "tar.gz"',
}
SIZE = {"vcpu": 1, "memoryMb": 512}
MAX_FILE_FIELDS = 4
_USD_RE = re.compile(r"^(0|[1-9][0-9]*)(?:\.([0-9]+))?$")
_MEDIA_RE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)$")
PRICE_HINT = 'use {"model": "free"} or {"model": "per_call", "usd": "0.0001"}'


def _tool(m: Mapping[str, Any]) -> Mapping[str, Any]:
    tool = m.get("tool")
    return tool if isinstance(tool, Mapping) else {}


def check_kind_base(m: Mapping[str, Any], r: Report) -> None:
    if not is_tool_pack(m) or "tool" not in m:
        return
    if not isinstance(m["tool"], Mapping):
        r.add(13, "tool", m["tool"], "use an object with kind, base, bundle, upstream and notices")
        return
    tool = _tool(m)
    if tool.get("kind") != "cli":
        r.add(13, "tool.kind", tool.get("kind"), missing_or("kind" in tool, 'use "cli"'))
    if not same(tool.get("base"), {"name": "base"}):
        r.add(
            13,
            "tool.base",
            tool.get("base"),
            missing_or("base" in tool, 'use {"name": "base"} (Ubuntu with Python 3 and jq)'),
        )


def check_size(m: Mapping[str, Any], r: Report) -> None:
    tool = _tool(m)
    if "size" in tool and not same(tool["size"], SIZE):
        r.add(14, "tool.size", tool["size"], 'omit it or use {"vcpu": 1, "memoryMb": 512}')


def check_runtime_network(m: Mapping[str, Any], r: Report) -> None:
    tool = _tool(m)
    if "runtime" in tool and not same(tool["runtime"], {"mode": "call"}):
        r.add(
            15, "tool.runtime", tool["runtime"], 'omit it or use {"mode": "call"}: a fresh VM for each call'
        )
    if "network" in tool and not same(tool["network"], {"mode": "none"}):
        r.add(15, "tool.network", tool["network"], 'omit it or use {"mode": "none"}: a tool has no network')


def check_features(m: Mapping[str, Any], r: Report) -> None:
    tool = _tool(m)
    raw_bundle = tool.get("bundle")
    bundle: Mapping[str, Any] = raw_bundle if isinstance(raw_bundle, Mapping) else {}
    objects: tuple[tuple[str, Mapping[str, Any]], ...] = (("", m), ("tool.", tool), ("tool.bundle.", bundle))
    for prefix, obj in objects:
        for key, why in REFUSED_FEATURES.items():
            if key in obj:
                r.add(16, prefix + key, obj[key], why)
    for key in tool:
        if key not in TOOL_FIELDS and key not in REFUSED_FEATURES:
            r.add(
                16, f"tool.{key}", tool[key], "a tool declares only " + ", ".join(TOOL_FIELDS), name_only=True
            )
    if is_tool_pack(m):
        for key, why in (
            ("connections", "a tool uses no credential"),
            ("triggers", "a tool answers calls only"),
            ("egress", "a tool's VM has no network"),
        ):
            if m.get(key) not in (None, []):
                r.add(16, key, m[key], f"a tool pack has no {key}: {why}")


def _under_tool(path: Any) -> bool:
    return (
        isinstance(path, str)
        and path.startswith("/tool/")
        and len(path) > len("/tool/")
        and posixpath.normpath(path) == path
    )


def check_vm_actions(m: Mapping[str, Any], r: Report) -> None:
    if not is_tool_pack(m):
        return
    if "tool" not in m:
        r.add(
            17,
            "tool",
            None,
            missing_or(False, "a pack with vm actions declares a tool section (kind, base, bundle, ...)"),
        )
    shape = 'use {"kind": "vm", "protocol": "json-stdio", "cmd": ["/tool/..."]}'
    for p, a in actions_of(m):
        impl = a.get("impl")
        effects = a.get("effects")
        cls = effects.get("class") if isinstance(effects, Mapping) else None
        if cls != "pure" and isinstance(effects, Mapping):
            r.add(17, f"{p}.effects.class", cls, 'use "pure": a tool has no network and keeps nothing')
        if not isinstance(impl, Mapping):
            r.add(17, f"{p}.impl", impl, missing_or("impl" in a, shape))
        else:
            if impl.get("kind") != "vm":
                r.add(17, f"{p}.impl.kind", impl.get("kind"), 'every action of a tool pack is "vm"')
                continue
            if impl.get("protocol") != "json-stdio":
                r.add(
                    17,
                    f"{p}.impl.protocol",
                    impl.get("protocol"),
                    missing_or("protocol" in impl, 'use "json-stdio"'),
                )
            cmd = impl.get("cmd")
            if (
                not isinstance(cmd, list)
                or not cmd
                or not all(isinstance(c, str) and "\0" not in c for c in cmd)
            ):
                r.add(
                    17,
                    f"{p}.impl.cmd",
                    cmd,
                    missing_or("cmd" in impl, 'use a non-empty list of strings such as ["/tool/bin/x"]'),
                )
            elif not _under_tool(cmd[0]):
                r.add(
                    17,
                    f"{p}.impl.cmd[0]",
                    cmd[0],
                    "use an absolute path under /tool/, where tool/ is unpacked",
                )
            for key in impl:
                if key not in ("kind", "protocol", "cmd"):
                    r.add(17, f"{p}.impl.{key}", impl[key], "a vm impl has only kind, protocol and cmd")


def check_timeout(m: Mapping[str, Any], r: Report) -> None:
    for p, a in actions_of(m):
        if "execution" not in a:
            continue
        ex = a["execution"]
        if not isinstance(ex, Mapping):
            r.add(18, f"{p}.execution", ex, 'use {"timeoutMs": <100 to 60000>} or omit it')
            continue
        t = ex.get("timeoutMs", 30000)
        if isinstance(t, bool) or not isinstance(t, int) or not 100 <= t <= 60000:
            r.add(
                18,
                f"{p}.execution.timeoutMs",
                t,
                "use an integer from 100 to 60000 (milliseconds), or omit it for 30000",
            )
        for key in ex:
            if key != "timeoutMs":
                r.add(18, f"{p}.execution.{key}", ex[key], "execution has only timeoutMs")


def _file_marks(node: Any, parts: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == "x-b3os-file":
                yield parts, v
            yield from _file_marks(v, (*parts, str(k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _file_marks(v, (*parts, str(i)))


def check_files(m: Mapping[str, Any], r: Report) -> None:
    for p, a in actions_of(m):
        for field, word, where in (
            ("inputSchema", "accept", "input"),
            ("outputSchema", "produces", "output"),
        ):
            schema = a.get(field)
            if not isinstance(schema, Mapping):
                continue
            props = schema.get("properties")
            top: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
            count = 0
            for parts, mark in _file_marks(schema):
                at = ".".join((f"{p}.{field}", *parts, "x-b3os-file"))
                prop = top.get(parts[1]) if len(parts) == 2 and parts[0] == "properties" else None
                if not isinstance(prop, Mapping) or prop.get("type") != "object":
                    r.add(19, at, mark, 'put x-b3os-file on a top-level property of type "object"')
                    continue
                count += 1
                items = mark.get(word) if isinstance(mark, Mapping) else None
                if (
                    not isinstance(mark, Mapping)
                    or set(mark) != {word}
                    or not isinstance(items, list)
                    or not items
                    or not all(isinstance(t, str) and _MEDIA_RE.match(t) for t in items)
                ):
                    r.add(19, at, mark, f'use {{"{word}": ["text/plain", ...]}} in the {where} schema')
            if count > MAX_FILE_FIELDS:
                r.add(
                    19,
                    f"{p}.{field}",
                    None,
                    "",
                    sentence=(
                        f"{p}.{field} has {count} x-b3os-file properties, "
                        "which is not accepted in this version: "
                        f"use at most {MAX_FILE_FIELDS} in the {where} schema"
                    ),
                )


def _check_price(r: Report, field: str, pricing: Any, io_b3os_tool: bool) -> None:
    if not isinstance(pricing, Mapping) or pricing.get("model") not in ("free", "per_call"):
        r.add(20, field, pricing, PRICE_HINT)
        return
    if pricing["model"] == "free":
        if set(pricing) != {"model"}:
            r.add(20, field, pricing, 'a free price is {"model": "free"} alone')
        return
    usd = pricing.get("usd")
    m = _USD_RE.match(usd) if isinstance(usd, str) else None
    if m is None or len(m[2] or "") > 6 or not Decimal(0) < Decimal(usd) <= Decimal(1):  # type: ignore[arg-type]
        r.add(
            20,
            f"{field}.usd",
            usd,
            'use a decimal text above 0 and at most 1 USD with at most 6 decimal places, such as "0.0001"',
        )
    elif set(pricing) != {"model", "usd"}:
        r.add(20, field, pricing, 'a per_call price is {"model": "per_call", "usd": ...} alone')
    elif io_b3os_tool:
        r.add(20, field, pricing, 'a tool in io.b3os has no price: omit pricing or use {"model": "free"}')


def check_pricing(m: Mapping[str, Any], r: Report) -> None:
    io_b3os_tool = is_tool_pack(m) and str(m.get("pack", "")).partition("/")[0] == "io.b3os"
    if "pricing" in m:
        _check_price(r, "pricing", m["pricing"], io_b3os_tool)
    for p, a in actions_of(m):
        if "pricing" in a:
            _check_price(r, f"{p}.pricing", a["pricing"], io_b3os_tool)


def check_engine_floor(m: Mapping[str, Any], r: Report) -> None:
    if not is_tool_pack(m):
        return
    try:
        rng = CaretRange.parse(m.get("engine"))  # type: ignore[arg-type]
    except ValueError:
        return  # check 5 names it
    if rng.admits("1.0.0"):
        r.add(
            21,
            "engine",
            m["engine"],
            'a tool pack needs an engine range that does not admit 1.0.0, such as "^1.1"',
        )


def check_archive(m: Mapping[str, Any], r: Report) -> None:
    if not is_tool_pack(m) or not isinstance(m.get("tool"), Mapping):
        return
    tool = _tool(m)
    bundle = tool.get("bundle")
    archive = bundle.get("archive") if isinstance(bundle, Mapping) else None
    if not isinstance(archive, Mapping):
        field = "tool.bundle.archive" if isinstance(bundle, Mapping) else "tool.bundle"
        r.add(
            22,
            field,
            archive if isinstance(bundle, Mapping) else bundle,
            missing_or(
                field.rpartition(".")[2] in (bundle if isinstance(bundle, Mapping) else tool),
                'a tool pack carries {"archive": {sha256, bytes, format, unpackedBytes, entries}}: '
                "`b3os tool build` fills it",
            ),
        )
        return
    sha = archive.get("sha256")
    if not isinstance(sha, str) or re.match(r"^[0-9a-f]{64}$", sha) is None:
        r.add(
            22,
            "tool.bundle.archive.sha256",
            sha,
            "use the archive's 64 lowercase hex digits: `b3os tool build` fills it",
        )
    limits = (
        ("bytes", 1, MAX_PACKED_BYTES, "64 MiB packed"),
        ("unpackedBytes", 0, MAX_UNPACKED_BYTES, "512 MiB unpacked"),
        ("entries", 1, MAX_ENTRIES, "20,000 entries"),
    )
    for key, low, high, words in limits:
        v = archive.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            r.add(
                22,
                f"tool.bundle.archive.{key}",
                v,
                f"use an integer from {low} to {high} ({words}): `b3os tool build` fills it",
            )
    if archive.get("format") not in ("tar", "tar.gz"):
        r.add(22, "tool.bundle.archive.format", archive.get("format"), 'use "tar" or "tar.gz"')
    for key in archive:
        if key not in ("sha256", "bytes", "format", "unpackedBytes", "entries"):
            r.add(
                22,
                f"tool.bundle.archive.{key}",
                archive[key],
                "an archive has only sha256, bytes, format, unpackedBytes and entries",
                name_only=True,
            )
    for key, value in bundle.items() if isinstance(bundle, Mapping) else ():
        if key != "archive" and key not in REFUSED_FEATURES:
            r.add(22, f"tool.bundle.{key}", value, "a bundle has only archive", name_only=True)


def check_upstream_notices(m: Mapping[str, Any], r: Report) -> None:
    if not is_tool_pack(m) or not isinstance(m.get("tool"), Mapping):
        return
    tool = _tool(m)
    upstream = tool.get("upstream")
    hint = 'use a list of {"name", "license"} (with "version" and "url" if known), [] when none'
    if not isinstance(upstream, list):
        r.add(23, "tool.upstream", upstream, missing_or("upstream" in tool, hint))
    else:
        for i, u in enumerate(upstream):
            ok = (
                isinstance(u, Mapping)
                and set(u) <= {"name", "version", "license", "url"}
                and all(isinstance(u.get(k), str) and u.get(k) for k in ("name", "license"))
                and all(isinstance(u.get(k), str) for k in u)
            )
            if not ok:
                r.add(23, f"tool.upstream[{i}]", u, hint)
    notices = tool.get("notices")
    if not isinstance(notices, str) or not all(is_file_name(s) for s in notices.split("/")):
        r.add(
            23,
            "tool.notices",
            notices,
            missing_or(
                "notices" in tool,
                'use the relative path of the notices file in the pack, such as "NOTICES.md", '
                "each segment matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
            ),
        )


TOOL_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (
    check_kind_base,
    check_size,
    check_runtime_network,
    check_features,
    check_vm_actions,
    check_timeout,
    check_files,
    check_pricing,
    check_engine_floor,
    check_archive,
    check_upstream_notices,
)

__all__ = ["TOOL_CHECKS", "render"]
