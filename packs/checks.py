"""The publish checks: one numbered list, every violation reported at once.

`run_checks` reads the raw manifest dict, so that it can name fields this version refuses
("sessions", "setup", ...). Each violation's message reads "check N: <field> <value> is not
accepted...: <what is accepted>". Checks 13 to 20 are the tool-pack value refusals of the
hosted-tools contract. docs/packs.md lists every check; `CHECKS` is the same list in code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from packs.checks_connections import CONNECTION_CHECKS
from packs.checks_http import HTTP_CHECKS
from packs.checks_js import FIRST_PARTY, JS_CHECKS, first_party_check
from packs.checks_tool import TOOL_CHECKS
from packs.checks_triggers import TRIGGER_CHECKS
from packs.checks_util import (
    HOST_RE,
    Report,
    actions_of,
    check_text,
    is_tool_pack,
    missing_or,
    public_host_problem,
    render,
    schema_error,
)
from packs.errors import Violation
from packs.fixtures import RULE as FIXTURES_RULE
from packs.names import NAME_HINT, NAMESPACE_HINT, is_name, is_namespace, is_semver
from packs.semver import ENGINE_VERSION, CaretRange

CHECKS: dict[int, str] = {
    1: 'pack is "<namespace>/<name>"',
    2: "version is MAJOR.MINOR.PATCH",
    3: "title (1 to 100 characters, one line), description (1 to 2000) and license (1 to 100, one line) "
    "are text",
    4: 'publisher is {"id": <the pack\'s namespace>, "name": <1 to 100 characters>}',
    5: f'engine is a caret range ("^1.1") that admits this engine, {ENGINE_VERSION}',
    6: "the manifest has only known top-level fields",
    7: 'egress is a list of {"host"}, each a public DNS name under a known public suffix (no IP address, '
    "special-use name or wildcard over a public suffix); connections and triggers are lists of objects "
    "with a unique key",
    8: "actions is a non-empty list of objects whose keys are names and unique",
    9: "each action has a title, a description, effects.class read, write or pure, impl.kind http, vm or js, "
    "and only known fields",
    10: 'inputSchema and outputSchema are valid JSON Schemas (2020-12) of type "object"',
    11: "an http action's impl.request has a method and an https url whose host is written out (no ${{ }}) "
    "and in egress, and whose port, if any, is 1 to 65535",
    12: 'signature, when present, is {"kid", "alg": "ed25519", "hash", "value"} with a kid of the '
    "pack's namespace",
    13: 'tool.kind is "cli" and tool.base is {"name": "base"}',
    14: 'tool.size is absent or {"vcpu": 1, "memoryMb": 512}',
    15: 'tool.runtime is absent or {"mode": "call"}; tool.network is absent or {"mode": "none"}',
    16: "a tool pack declares no sessions, setup, image, formats, connections, triggers or egress, and only "
    "known tool fields",
    17: 'every action of a tool pack is {"kind": "vm", "protocol": "json-stdio", "cmd": [...]} with '
    "cmd[0] under /tool/, and effects.class pure",
    18: "execution.timeoutMs is absent (30000) or an integer from 100 to 60000",
    19: 'x-b3os-file sits on a top-level property of type "object", is {"accept": [...]} in the input and '
    '{"produces": [...]} in the output schema, at most 4 each way',
    20: 'pricing is {"model": "free"} or {"model": "per_call", "usd": "<at most 1, at most 6 decimals>"}; '
    "a tool in io.b3os has no price",
    21: "a tool pack's engine range does not admit 1.0.0",
    22: "tool.bundle.archive has sha256 (64 hex), bytes (1 to 64 MiB), format tar or tar.gz, unpackedBytes "
    "(up to 512 MiB) and entries (1 to 20,000)",
    23: 'tool.upstream is a list of {"name", "license"} and tool.notices a bundle file name',
    24: 'each connection is {"key", "kind", "title", "hosts", "params"?, "inject"?} with kind api_key, '
    "bearer, basic or oauth2, a one-line title and params, when present, a JSON Schema (2020-12) of type "
    '"object"',
    25: "a connection's hosts are a non-empty list of host names, each within egress",
    26: 'inject is required for an api_key connection and only there: {"header": NAME} (not Authorization, '
    'Cookie, Host, Content-Length or a hop-by-hop header) or {"query": NAME}',
    27: "an action's connections are unique keys of the pack's connections, on http and js actions only",
    28: "an http action's impl.request has only method, url, query (text, number or boolean values), headers "
    "(name to one-line text; not Host, Content-Length or a hop-by-hop header) and body (POST, PUT or PATCH)",
    29: "no template sets a header or query parameter that one of the action's connections injects",
    30: "an http impl has only kind, request and response, and response only success (one ${{ }} "
    "expression), map and errors",
    31: 'response.errors is a list of {"when": one ${{ }} expression, "code": 1 to 60 of a-z, 0-9, _ and -, '
    '"message"?: text, "retryable"?: true or false}',
    32: (
        "every ${{ }} of an http action's request and response parses as CEL, within the caps routines' "
        "expressions have (2,000 characters, 32 levels of nesting, 3 macros inside one another: "
        "docs/routines.md), and the manifest's template expressions hold at most 32,000 characters in all "
        "(past that, only that is said, at the field that passes it, and none is parsed)"
    ),
    33: 'a js action\'s impl is {"kind": "js", "entry": <a .js or .mjs file under js/>, "export": <a name>, '
    '"errors"?: [{"code", "message"?, "retryable"?}]}, and its schemas mark no x-b3os-file',
    34: "js actions only in first-party namespaces: io.b3os and those the operator lists",
    35: "a js action's entry is a file of the pack's js/ that parses as an ES module, imports only the "
    "pack's own files by relative paths, and exports the function the action names",
    36: 'each trigger has a title, a description, kind "webhook" or "poll" with its section of that name '
    "(and not the other), and only known fields",
    37: "a trigger's eventSchema and inputSchema (when present) are valid JSON Schemas (2020-12) of type "
    '"object"',
    38: 'a webhook is {"verify": {"kind": "hmac-sha256", "header", "prefix"?, "timestamp"?: {"header", '
    '"toleranceS"?: 1 to 3600}}, "events"?: one ${{ }} expression, "id": one ${{ }} expression} and uses no '
    "connection",
    39: 'a poll is {"everyS"?: 60 to 86400, "request": {"method"?: GET or POST, "url": https with its host '
    'written out and in egress, "query"?, "headers"?, "body"? (POST)}, "items", "dedupe", "cursor"?: one '
    '${{ }} expression each, "event"?}, its connections are the pack\'s, and no template sets a header they '
    "inject",
    40: "every ${{ }} of a trigger parses as CEL, within the caps of routines' expressions",
    41: FIXTURES_RULE,
}

TOP_LEVEL_FIELDS = (
    "pack",
    "version",
    "title",
    "description",
    "publisher",
    "license",
    "engine",
    "egress",
    "connections",
    "actions",
    "triggers",
    "pricing",
    "tool",
    "signature",
)
ACTION_FIELDS = (
    "key",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "effects",
    "impl",
    "execution",
    "pricing",
    "connections",
)
REFUSED_FEATURES = ("sessions", "setup", "image", "formats")


def run_checks(manifest: Any, *, first_party: Collection[str] = FIRST_PARTY) -> list[Violation]:
    """Run every publish check on a raw manifest.

    Args:
        manifest: the raw b3pack.json.
        first_party: the namespaces that may publish js actions besides io.b3os (the operator's list).

    Returns:
        Every violation, by check number; empty when the manifest may be published.
    """
    report = Report()
    if not isinstance(manifest, Mapping):
        report.add(1, "manifest", manifest, "a manifest is a JSON object")
        return report.violations(Violation)
    js = (*JS_CHECKS, first_party_check(first_party))
    for check in (*GENERAL_CHECKS, *HTTP_CHECKS, *CONNECTION_CHECKS, *TOOL_CHECKS, *js, *TRIGGER_CHECKS):
        check(manifest, report)
    return report.violations(Violation)


def check_pack(m: Mapping[str, Any], r: Report) -> None:
    pack = m.get("pack")
    ns, sep, name = pack.partition("/") if isinstance(pack, str) else ("", "", "")
    if not sep or not is_namespace(ns) or not is_name(name):
        r.add(
            1,
            "pack",
            pack,
            missing_or(
                "pack" in m,
                f'use "<namespace>/<name>" such as '
                f'"com.example.tools/echo": a namespace of {NAMESPACE_HINT}, '
                f"a name of {NAME_HINT}",
            ),
        )


def check_version(m: Mapping[str, Any], r: Report) -> None:
    if not is_semver(m.get("version")):
        r.add(
            2,
            "version",
            m.get("version"),
            missing_or("version" in m, 'use MAJOR.MINOR.PATCH without leading zeros, such as "1.0.0"'),
        )


def check_texts(m: Mapping[str, Any], r: Report) -> None:
    check_text(r, 3, m, "title", "", 100, True)
    check_text(r, 3, m, "description", "", 2000, False)
    check_text(r, 3, m, "license", "", 100, True)


def check_publisher(m: Mapping[str, Any], r: Report) -> None:
    pub = m.get("publisher")
    ns = str(m.get("pack", "")).partition("/")[0]
    shown = f'"{ns}"' if is_namespace(ns) else "<the pack's namespace>"
    if not isinstance(pub, Mapping):
        r.add(4, "publisher", pub, missing_or("publisher" in m, f'use {{"id": {shown}, "name": ...}}'))
        return
    if pub.get("id") != ns and is_namespace(ns):
        r.add(4, "publisher.id", pub.get("id"), missing_or("id" in pub, f"use the pack's namespace {shown}"))
    check_text(r, 4, pub, "name", "publisher.", 100, True)
    for key in pub:
        if key not in ("id", "name"):
            r.add(4, f"publisher.{key}", pub[key], "a publisher has only id and name")


def check_engine(m: Mapping[str, Any], r: Report) -> None:
    engine = m.get("engine")
    try:
        rng = CaretRange.parse(engine)  # type: ignore[arg-type]
    except ValueError:
        r.add(5, "engine", engine, missing_or("engine" in m, 'use a caret range such as "^1.1"'))
        return
    if not rng.admits(ENGINE_VERSION):
        r.add(
            5,
            "engine",
            engine,
            f'this engine is {ENGINE_VERSION}: use a range that admits it, such as "^1.1"',
        )


def check_top_level_fields(m: Mapping[str, Any], r: Report) -> None:
    for key in m:
        if key not in TOP_LEVEL_FIELDS and key not in REFUSED_FEATURES:
            r.add(
                6,
                str(key),
                m[key],
                "a manifest has only the fields " + ", ".join(TOP_LEVEL_FIELDS),
                name_only=True,
            )


def check_declarations(m: Mapping[str, Any], r: Report) -> None:
    egress = m.get("egress", [])
    if not isinstance(egress, list):
        r.add(7, "egress", egress, 'use a list of {"host": "api.example.com"}')
    else:
        for i, item in enumerate(egress):
            host = item.get("host") if isinstance(item, Mapping) else None
            if not isinstance(host, str) or HOST_RE.match(host) is None or set(item) != {"host"}:
                r.add(7, f"egress[{i}]", item, 'use {"host": "api.example.com"}, a lowercase host name')
            elif (problem := public_host_problem(host)) is not None:
                r.add(7, f"egress[{i}].host", host, f"{problem}; use a public name such as api.example.com")
    for field in ("connections", "triggers"):
        value = m.get(field, [])
        if not isinstance(value, list):
            r.add(7, field, value, "use a list of objects, each with a key")
            continue
        seen: set[str] = set()
        for i, item in enumerate(value):
            key = item.get("key") if isinstance(item, Mapping) else None
            if not is_name(key) or key in seen:
                r.add(7, f"{field}[{i}].key", key, f"use a unique key of {NAME_HINT}")
            seen.add(str(key))


def check_actions(m: Mapping[str, Any], r: Report) -> None:
    actions = m.get("actions")
    if not isinstance(actions, list) or not actions:
        r.add(8, "actions", actions, missing_or("actions" in m, "use a non-empty list of actions"))
        return
    seen: set[str] = set()
    for i, a in enumerate(actions):
        if not isinstance(a, Mapping):
            r.add(8, f"actions[{i}]", a, "an action is a JSON object")
            continue
        key = a.get("key")
        if not is_name(key):
            r.add(8, f"actions[{i}].key", key, missing_or("key" in a, f"use {NAME_HINT}"))
        elif key in seen:
            r.add(8, f"actions[{i}].key", key, "action keys are unique: use another key")
        seen.add(str(key))


def check_action_fields(m: Mapping[str, Any], r: Report) -> None:
    for p, a in actions_of(m):
        check_text(r, 9, a, "title", p + ".", 100, True)
        check_text(r, 9, a, "description", p + ".", 2000, False)
        effects = a.get("effects")
        cls = effects.get("class") if isinstance(effects, Mapping) else None
        if cls not in ("read", "write", "pure"):
            r.add(
                9,
                f"{p}.effects",
                effects,
                missing_or("effects" in a, 'use {"class": "read"}, "write" or "pure"'),
            )
        impl = a.get("impl")
        kind = impl.get("kind") if isinstance(impl, Mapping) else None
        if kind not in ("http", "vm", "js"):
            r.add(
                9,
                f"{p}.impl.kind" if isinstance(impl, Mapping) else f"{p}.impl",
                kind if impl else impl,
                missing_or("impl" in a, 'use "http", "vm" or "js"'),
            )
        for key in a:
            if key not in ACTION_FIELDS:
                r.add(
                    9,
                    f"{p}.{key}",
                    a[key],
                    "an action has only the fields " + ", ".join(ACTION_FIELDS),
                    name_only=True,
                )


def check_schemas(m: Mapping[str, Any], r: Report) -> None:
    for p, a in actions_of(m):
        for field in ("inputSchema", "outputSchema"):
            schema = a.get(field)
            if not isinstance(schema, Mapping):
                r.add(
                    10, f"{p}.{field}", schema, missing_or(field in a, 'use a JSON Schema of type "object"')
                )
                continue
            problem = schema_error(schema)
            if problem is not None:
                where, instance, why = problem
                r.add(10, f"{p}.{field}{where}", instance, why)
                continue
            if schema.get("type") != "object":
                r.add(10, f"{p}.{field}.type", schema.get("type"), 'use "object" at the top of the schema')


def check_signature(m: Mapping[str, Any], r: Report) -> None:
    if "signature" not in m:
        return
    sig = m["signature"]
    ns = str(m.get("pack", "")).partition("/")[0]
    shape = {"kid", "alg", "hash", "value"}
    if not isinstance(sig, Mapping) or set(sig) != shape:
        r.add(12, "signature", sig, 'use {"kid", "alg", "hash", "value"} as the build writes it')
        return
    if (
        not isinstance(sig["kid"], str)
        or sig["kid"].partition("#")[0] != ns
        or not sig["kid"].partition("#")[2]
    ):
        r.add(12, "signature.kid", sig["kid"], f'use a key id of the pack\'s namespace, "{ns}#<name>"')
    if sig["alg"] != "ed25519":
        r.add(12, "signature.alg", sig["alg"], 'use "ed25519"')
    if not isinstance(sig["hash"], str) or re.match(r"^sha256:[0-9a-f]{64}$", sig["hash"]) is None:
        r.add(12, "signature.hash", sig["hash"], 'use "sha256:<64 lowercase hex>"')
    if not isinstance(sig["value"], str) or re.match(r"^[A-Za-z0-9+/]{86}==$", sig["value"]) is None:
        r.add(12, "signature.value", sig["value"], "use the base64 of a 64-byte Ed25519 signature")


GENERAL_CHECKS: tuple[Callable[[Mapping[str, Any], Report], None], ...] = (
    check_pack,
    check_version,
    check_texts,
    check_publisher,
    check_engine,
    check_top_level_fields,
    check_declarations,
    check_actions,
    check_action_fields,
    check_schemas,
    check_signature,
)

__all__ = ["CHECKS", "run_checks", "is_tool_pack", "render"]
