# ruff: noqa: E501
"""The publish checks: each check refuses its fixture with the exact sentence, and all at once."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from packfixtures import echo_manifest, open_meteo_manifest

from packs.checks import CHECKS, run_checks

ECHO = echo_manifest()
OM = open_meteo_manifest()
DELETE = object()


def mutate(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with each dotted path ("tool.size", "actions[0].impl.cmd") set or deleted."""
    m = copy.deepcopy(base)
    for path, value in changes.items():
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        obj: Any = m
        for p in parts[:-1]:
            obj = obj[int(p[1:-1])] if p.startswith("[") else obj[p]
        last = parts[-1]
        key: Any = int(last[1:-1]) if last.startswith("[") else last
        if value is DELETE:
            del obj[key]
        else:
            obj[key] = value
    return m


CASES: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = [
    (
        OM,
        {"pack": "Open-Meteo"},
        [
            'check 1: pack "Open-Meteo" is not accepted: use "<namespace>/<name>" such as "com.example.tools/echo": a namespace of lowercase dot-separated labels of letters, digits and hyphens, at least two, such as "com.example.tools", a name of lowercase letters, digits and hyphens, 1 to 64 characters, starting and ending with a letter or digit'
        ],
    ),
    (
        OM,
        {"pack": DELETE},
        [
            'check 1: pack is missing: use "<namespace>/<name>" such as "com.example.tools/echo": a namespace of lowercase dot-separated labels of letters, digits and hyphens, at least two, such as "com.example.tools", a name of lowercase letters, digits and hyphens, 1 to 64 characters, starting and ending with a letter or digit'
        ],
    ),
    (
        OM,
        {"version": "1.0"},
        [
            'check 2: version "1.0" is not accepted: use MAJOR.MINOR.PATCH without leading zeros, such as "1.0.0"'
        ],
    ),
    (
        OM,
        {"title": "a\nb"},
        ['check 3: title "a\\nb" is not accepted: use a text of 1 to 100 characters on one line'],
    ),
    (
        OM,
        {"description": ""},
        ['check 3: description "" is not accepted: use a text of 1 to 2000 characters'],
    ),
    (
        OM,
        {"license": DELETE},
        ["check 3: license is missing: use a text of 1 to 100 characters on one line"],
    ),
    (
        OM,
        {"publisher.id": "com.example"},
        ['check 4: publisher.id "com.example" is not accepted: use the pack\'s namespace "io.b3os"'],
    ),
    (
        OM,
        {"publisher": "B3OS"},
        ['check 4: publisher "B3OS" is not accepted: use {"id": "io.b3os", "name": ...}'],
    ),
    (
        OM,
        {"engine": ">=1.0"},
        ['check 5: engine ">=1.0" is not accepted: use a caret range such as "^1.1"'],
    ),
    (
        OM,
        {"engine": "^2.0"},
        [
            'check 5: engine "^2.0" is not accepted: this engine is 1.1.0: use a range that admits it, such as "^1.1"'
        ],
    ),
    (
        OM,
        {"homepage": "https://x"},
        [
            "check 6: homepage is not accepted: a manifest has only the fields pack, version, title, description, publisher, license, engine, egress, connections, actions, triggers, pricing, tool, signature"
        ],
    ),
    (
        OM,
        {"egress": [{"host": "https://geocoding-api.open-meteo.com"}]},
        [
            'check 7: egress[0] {"host": "https://geocoding-api.open-meteo.com"} is not accepted: use {"host": "api.example.com"}, a lowercase host name',
            'check 11: actions[0].impl.request.url "https://geocoding-api.open-meteo.com/v1/search" is not accepted: its host geocoding-api.open-meteo.com is not in egress: add {"host": "geocoding-api.open-meteo.com"}',
        ],
    ),
    (
        OM,
        {
            "connections": [
                {"key": "Bad_Key", "kind": "bearer", "title": "T", "hosts": ["geocoding-api.open-meteo.com"]}
            ]
        },
        [
            'check 7: connections[0].key "Bad_Key" is not accepted: use a unique key of lowercase letters, digits and hyphens, 1 to 64 characters, starting and ending with a letter or digit'
        ],
    ),
    (
        OM,
        {"triggers": {"key": "t"}},
        ['check 7: triggers {"key": "t"} is not accepted: use a list of objects, each with a key'],
    ),
    (
        OM,
        {"actions": []},
        ["check 8: actions [] is not accepted: use a non-empty list of actions"],
    ),
    (
        OM,
        {"actions[0].key": "Search_Places"},
        [
            'check 8: actions[0].key "Search_Places" is not accepted: use lowercase letters, digits and hyphens, 1 to 64 characters, starting and ending with a letter or digit'
        ],
    ),
    (
        ECHO,
        {"actions[1].key": "noop"},
        ['check 8: actions[1].key "noop" is not accepted: action keys are unique: use another key'],
    ),
    (
        OM,
        {"actions[0].effects": {"class": "delete"}},
        [
            'check 9: actions[0].effects {"class": "delete"} is not accepted: use {"class": "read"}, "write" or "pure"'
        ],
    ),
    (
        OM,
        {"actions[0].impl.kind": "wasm"},
        ['check 9: actions[0].impl.kind "wasm" is not accepted: use "http", "vm" or "js"'],
    ),
    (
        OM,
        {"actions[0].timeout": 5},
        [
            "check 9: actions[0].timeout is not accepted: an action has only the fields key, title, description, inputSchema, outputSchema, effects, impl, execution, pricing, connections"
        ],
    ),
    (
        OM,
        {"actions[0].inputSchema.properties.name.minLength": -1},
        [
            "check 10: actions[0].inputSchema.properties.name.minLength -1 is not accepted: it is not valid JSON Schema (2020-12): -1 is less than the minimum of 0"
        ],
    ),
    (
        OM,
        {"actions[0].outputSchema.type": "array"},
        [
            'check 10: actions[0].outputSchema.type "array" is not accepted: use "object" at the top of the schema'
        ],
    ),
    (
        OM,
        {"actions[0].inputSchema": DELETE},
        ['check 10: actions[0].inputSchema is missing: use a JSON Schema of type "object"'],
    ),
    (
        OM,
        {"actions[0].impl.request.url": "http://geocoding-api.open-meteo.com/v1/search"},
        [
            'check 11: actions[0].impl.request.url "http://geocoding-api.open-meteo.com/v1/search" is not accepted: use an https:// URL'
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.url": "https://evil.example.com/v1/search"},
        [
            'check 11: actions[0].impl.request.url "https://evil.example.com/v1/search" is not accepted: its host evil.example.com is not in egress: add {"host": "evil.example.com"}'
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.method": "FETCH"},
        [
            'check 11: actions[0].impl.request.method "FETCH" is not accepted: use GET, POST, PUT, PATCH or DELETE'
        ],
    ),
    (
        OM,
        {
            "signature": {
                "kid": "com.example#k",
                "alg": "ed25519",
                "hash": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "value": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
            }
        },
        [
            'check 12: signature.kid "com.example#k" is not accepted: use a key id of the pack\'s namespace, "io.b3os#<name>"'
        ],
    ),
    (
        OM,
        {
            "signature": {
                "kid": "io.b3os#k",
                "alg": "rsa",
                "hash": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "value": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
            }
        },
        ['check 12: signature.alg "rsa" is not accepted: use "ed25519"'],
    ),
    (
        OM,
        {"signature": "signed"},
        [
            'check 12: signature "signed" is not accepted: use {"kid", "alg", "hash", "value"} as the build writes it'
        ],
    ),
    (
        ECHO,
        {"tool.kind": "mcp"},
        ['check 13: tool.kind "mcp" is not accepted in this version: use "cli"'],
    ),
    (
        ECHO,
        {"tool.base": {"name": "browser"}},
        [
            'check 13: tool.base {"name": "browser"} is not accepted in this version: use {"name": "base"} (Ubuntu with Python 3 and jq)'
        ],
    ),
    (
        ECHO,
        {"tool.base": {"name": "code-interpreter"}},
        [
            'check 13: tool.base {"name": "code-interpreter"} is not accepted in this version: use {"name": "base"} (Ubuntu with Python 3 and jq)'
        ],
    ),
    (
        ECHO,
        {"tool.size": {"vcpu": 2, "memoryMb": 512}},
        [
            'check 14: tool.size {"vcpu": 2, "memoryMb": 512} is not accepted in this version: omit it or use {"vcpu": 1, "memoryMb": 512}'
        ],
    ),
    (
        ECHO,
        {"tool.size": {"vcpu": 1, "memoryMb": 1024}},
        [
            'check 14: tool.size {"vcpu": 1, "memoryMb": 1024} is not accepted in this version: omit it or use {"vcpu": 1, "memoryMb": 512}'
        ],
    ),
    (
        ECHO,
        {"tool.runtime": {"mode": "session"}},
        [
            'check 15: tool.runtime {"mode": "session"} is not accepted in this version: omit it or use {"mode": "call"}: a fresh VM for each call'
        ],
    ),
    (
        ECHO,
        {"tool.network": {"mode": "hosts", "hosts": ["api.example.com"]}},
        [
            'check 15: tool.network {"mode": "hosts", "hosts": ["api.example.com"]} is not accepted in this version: omit it or use {"mode": "none"}: a tool has no network'
        ],
    ),
    (
        ECHO,
        {"tool.network": {"mode": "caller"}},
        [
            'check 15: tool.network {"mode": "caller"} is not accepted in this version: omit it or use {"mode": "none"}: a tool has no network'
        ],
    ),
    (
        ECHO,
        {"tool.sessions": {"idleMs": 60000}},
        [
            'check 16: tool.sessions {"idleMs": 60000} is not accepted in this version: every call runs in a fresh VM; sessions that keep a VM between calls are not there yet'
        ],
    ),
    (
        ECHO,
        {"sessions": True},
        [
            "check 16: sessions true is not accepted in this version: every call runs in a fresh VM; sessions that keep a VM between calls are not there yet"
        ],
    ),
    (
        ECHO,
        {"tool.setup": ["apt-get install -y curl"]},
        [
            'check 16: tool.setup ["apt-get install -y curl"] is not accepted in this version: the archive is the tool\'s whole install; put the files under tool/ instead of a setup step'
        ],
    ),
    (
        ECHO,
        {"tool.image": "docker.io/library/ubuntu:24.04"},
        [
            'check 16: tool.image "docker.io/library/ubuntu:24.04" is not accepted in this version: tools built from an image are not there yet; put the files under tool/ on tool.base {"name": "base"}'
        ],
    ),
    (
        ECHO,
        {"tool.bundle.formats": ["zip"]},
        [
            'check 16: tool.bundle.formats ["zip"] is not accepted in this version: the archive\'s one format is tool.bundle.archive.format, "tar" or "tar.gz"'
        ],
    ),
    (
        ECHO,
        {"tool.formats": ["tar", "zip"]},
        [
            'check 16: tool.formats ["tar", "zip"] is not accepted in this version: the archive\'s one format is tool.bundle.archive.format, "tar" or "tar.gz"'
        ],
    ),
    (
        ECHO,
        {"tool.gpu": True},
        [
            "check 16: tool.gpu is not accepted in this version: a tool declares only kind, base, size, bundle, runtime, network, upstream, notices"
        ],
    ),
    (
        ECHO,
        {"connections": [{"key": "github"}]},
        [
            'check 16: connections [{"key": "github"}] is not accepted in this version: a tool pack has no connections: a tool uses no credential'
        ],
    ),
    (
        ECHO,
        {"triggers": [{"key": "hourly"}]},
        [
            'check 16: triggers [{"key": "hourly"}] is not accepted in this version: a tool pack has no triggers: a tool answers calls only'
        ],
    ),
    (
        ECHO,
        {"egress": [{"host": "api.example.com"}]},
        [
            'check 16: egress [{"host": "api.example.com"}] is not accepted in this version: a tool pack has no egress: a tool\'s VM has no network'
        ],
    ),
    (
        ECHO,
        {"actions[0].impl": {"kind": "http", "request": {"method": "GET", "url": "https://x.example.com"}}},
        [
            'check 11: actions[0].impl.request.url "https://x.example.com" is not accepted: its host x.example.com is not in egress: add {"host": "x.example.com"}',
            'check 17: actions[0].impl.kind "http" is not accepted in this version: every action of a tool pack is "vm"',
        ],
    ),
    (
        ECHO,
        {"actions[0].impl.cmd": ["/bin/sh", "-c", "echo"]},
        [
            'check 17: actions[0].impl.cmd[0] "/bin/sh" is not accepted in this version: use an absolute path under /tool/, where tool/ is unpacked'
        ],
    ),
    (
        ECHO,
        {"actions[0].impl.cmd": ["/tool/../bin/sh"]},
        [
            'check 17: actions[0].impl.cmd[0] "/tool/../bin/sh" is not accepted in this version: use an absolute path under /tool/, where tool/ is unpacked'
        ],
    ),
    (
        ECHO,
        {"actions[0].impl.cmd": []},
        [
            'check 17: actions[0].impl.cmd [] is not accepted in this version: use a non-empty list of strings such as ["/tool/bin/x"]'
        ],
    ),
    (
        ECHO,
        {"actions[0].impl.protocol": "stdio"},
        ['check 17: actions[0].impl.protocol "stdio" is not accepted in this version: use "json-stdio"'],
    ),
    (
        ECHO,
        {"actions[0].effects.class": "write"},
        [
            'check 17: actions[0].effects.class "write" is not accepted in this version: use "pure": a tool has no network and keeps nothing'
        ],
    ),
    (
        ECHO,
        {"tool": DELETE},
        [
            "check 17: tool is missing: a pack with vm actions declares a tool section (kind, base, bundle, ...)"
        ],
    ),
    (
        ECHO,
        {"actions[0].execution.timeoutMs": 99},
        [
            "check 18: actions[0].execution.timeoutMs 99 is not accepted in this version: use an integer from 100 to 60000 (milliseconds), or omit it for 30000"
        ],
    ),
    (
        ECHO,
        {"actions[0].execution.timeoutMs": 60001},
        [
            "check 18: actions[0].execution.timeoutMs 60001 is not accepted in this version: use an integer from 100 to 60000 (milliseconds), or omit it for 30000"
        ],
    ),
    (
        ECHO,
        {"actions[0].execution.timeoutMs": 1500.5},
        [
            "check 18: actions[0].execution.timeoutMs 1500.5 is not accepted in this version: use an integer from 100 to 60000 (milliseconds), or omit it for 30000"
        ],
    ),
    (
        ECHO,
        {"actions[1].inputSchema.properties.file.type": "string"},
        [
            'check 19: actions[1].inputSchema.properties.file.x-b3os-file {"accept": ["text/plain", "application/octet-stream"]} is not accepted in this version: put x-b3os-file on a top-level property of type "object"'
        ],
    ),
    (
        ECHO,
        {
            "actions[1].inputSchema.properties.text": {
                "type": "object",
                "properties": {"inner": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}}},
            }
        },
        [
            'check 19: actions[1].inputSchema.properties.text.properties.inner.x-b3os-file {"accept": ["text/plain"]} is not accepted in this version: put x-b3os-file on a top-level property of type "object"'
        ],
    ),
    (
        ECHO,
        {"actions[1].inputSchema.properties.file.x-b3os-file": {"produces": ["text/plain"]}},
        [
            'check 19: actions[1].inputSchema.properties.file.x-b3os-file {"produces": ["text/plain"]} is not accepted in this version: use {"accept": ["text/plain", ...]} in the input schema'
        ],
    ),
    (
        ECHO,
        {"actions[1].outputSchema.properties.file.x-b3os-file": {"accept": ["text/plain"]}},
        [
            'check 19: actions[1].outputSchema.properties.file.x-b3os-file {"accept": ["text/plain"]} is not accepted in this version: use {"produces": ["text/plain", ...]} in the output schema'
        ],
    ),
    (
        ECHO,
        {"actions[1].inputSchema.properties.file.x-b3os-file": {"accept": ["text"]}},
        [
            'check 19: actions[1].inputSchema.properties.file.x-b3os-file {"accept": ["text"]} is not accepted in this version: use {"accept": ["text/plain", ...]} in the input schema'
        ],
    ),
    (
        ECHO,
        {
            "actions[1].inputSchema.properties": {
                "f0": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
                "f1": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
                "f2": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
                "f3": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
                "f4": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
            },
            "actions[1].inputSchema.required": [],
        },
        [
            "check 19: actions[1].inputSchema has 5 x-b3os-file properties, which is not accepted in this version: use at most 4 in the input schema"
        ],
    ),
    (
        ECHO,
        {"pricing": {"model": "per_call", "usd": "1.01"}},
        [
            'check 20: pricing.usd "1.01" is not accepted in this version: use a decimal text above 0 and at most 1 USD with at most 6 decimal places, such as "0.0001"'
        ],
    ),
    (
        ECHO,
        {"pricing": {"model": "per_call", "usd": "0.0000001"}},
        [
            'check 20: pricing.usd "0.0000001" is not accepted in this version: use a decimal text above 0 and at most 1 USD with at most 6 decimal places, such as "0.0001"'
        ],
    ),
    (
        ECHO,
        {"pricing": {"model": "per_call", "usd": 0.0001}},
        [
            'check 20: pricing.usd 0.0001 is not accepted in this version: use a decimal text above 0 and at most 1 USD with at most 6 decimal places, such as "0.0001"'
        ],
    ),
    (
        ECHO,
        {"pricing": {"model": "monthly", "usd": "5"}},
        [
            'check 20: pricing {"model": "monthly", "usd": "5"} is not accepted in this version: use {"model": "free"} or {"model": "per_call", "usd": "0.0001"}'
        ],
    ),
    (
        ECHO,
        {"actions[0].pricing": {"model": "per_call", "usd": "2"}},
        [
            'check 20: actions[0].pricing.usd "2" is not accepted in this version: use a decimal text above 0 and at most 1 USD with at most 6 decimal places, such as "0.0001"'
        ],
    ),
    (
        ECHO,
        {"pack": "io.b3os/echo", "publisher.id": "io.b3os"},
        [
            'check 20: pricing {"model": "per_call", "usd": "0.0001"} is not accepted in this version: a tool in io.b3os has no price: omit pricing or use {"model": "free"}'
        ],
    ),
    (
        ECHO,
        {"engine": "^1.0"},
        [
            'check 21: engine "^1.0" is not accepted: a tool pack needs an engine range that does not admit 1.0.0, such as "^1.1"'
        ],
    ),
    (
        ECHO,
        {"engine": "^1"},
        [
            'check 21: engine "^1" is not accepted: a tool pack needs an engine range that does not admit 1.0.0, such as "^1.1"'
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive": DELETE},
        [
            'check 22: tool.bundle.archive is missing: a tool pack carries {"archive": {sha256, bytes, format, unpackedBytes, entries}}: `b3os tool build` fills it'
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive.sha256": ""},
        [
            'check 22: tool.bundle.archive.sha256 "" is not accepted: use the archive\'s 64 lowercase hex digits: `b3os tool build` fills it'
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive.bytes": 67108865},
        [
            "check 22: tool.bundle.archive.bytes 67108865 is not accepted: use an integer from 1 to 67108864 (64 MiB packed): `b3os tool build` fills it"
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive.unpackedBytes": 536870913},
        [
            "check 22: tool.bundle.archive.unpackedBytes 536870913 is not accepted: use an integer from 0 to 536870912 (512 MiB unpacked): `b3os tool build` fills it"
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive.entries": 20001},
        [
            "check 22: tool.bundle.archive.entries 20001 is not accepted: use an integer from 1 to 20000 (20,000 entries): `b3os tool build` fills it"
        ],
    ),
    (
        ECHO,
        {"tool.bundle.archive.format": "zip"},
        ['check 22: tool.bundle.archive.format "zip" is not accepted: use "tar" or "tar.gz"'],
    ),
    (
        ECHO,
        {"tool.upstream": [{"name": "jq"}]},
        [
            'check 23: tool.upstream[0] {"name": "jq"} is not accepted: use a list of {"name", "license"} (with "version" and "url" if known), [] when none'
        ],
    ),
    (
        ECHO,
        {"tool.notices": "../NOTICES.md"},
        [
            'check 23: tool.notices "../NOTICES.md" is not accepted: use the relative path of the notices file in the pack, such as "NOTICES.md", each segment matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'
        ],
    ),
    (
        ECHO,
        {"tool.notices": DELETE},
        [
            'check 23: tool.notices is missing: use the relative path of the notices file in the pack, such as "NOTICES.md", each segment matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'
        ],
    ),
]


def test_the_examples_pass_every_check() -> None:
    assert run_checks(ECHO) == []
    assert run_checks(OM) == []


@pytest.mark.parametrize(("base", "changes", "expected"), CASES, ids=[str(list(c[1])) for c in CASES])
def test_a_refused_value_gets_its_exact_sentence(
    base: dict[str, Any], changes: dict[str, Any], expected: list[str]
) -> None:
    assert [v.message for v in run_checks(mutate(base, changes))] == expected


def test_every_check_up_to_23_has_a_failing_fixture() -> None:
    # checks 24 to 32 (declarative HTTP actions and connections): test_pack_checks_http.py
    covered = {int(msg.split(":")[0].removeprefix("check ")) for _, _, msgs in CASES for msg in msgs}
    assert covered >= set(range(1, 24))


def test_checks_13_to_20_say_in_this_version() -> None:
    for _, _, msgs in CASES:
        for msg in msgs:
            n = int(msg.split(":")[0].removeprefix("check "))
            if "is not accepted" in msg:
                assert ("in this version" in msg) == (13 <= n <= 20), msg


def test_every_violation_is_reported_at_once() -> None:
    m = mutate(
        ECHO,
        {
            "tool.size": {"vcpu": 2, "memoryMb": 512},
            "tool.network": {"mode": "hosts"},
            "tool.setup": "make",
            "actions[0].execution.timeoutMs": 70000,
            "engine": "^1.0",
        },
    )
    violations = run_checks(m)
    assert [(v.check, v.field) for v in violations] == [
        (14, "tool.size"),
        (15, "tool.network"),
        (16, "tool.setup"),
        (18, "actions[0].execution.timeoutMs"),
        (21, "engine"),
    ]
    assert violations[0].message == (
        'check 14: tool.size {"vcpu": 2, "memoryMb": 512} is not accepted in this version: '
        'omit it or use {"vcpu": 1, "memoryMb": 512}'
    )


@pytest.mark.parametrize("value", [[], "manifest", 3, None])
def test_a_manifest_that_is_not_an_object_is_refused_without_a_traceback(value: Any) -> None:
    assert [v.check for v in run_checks(value)] == [1]


def test_garbage_in_every_field_never_raises() -> None:
    garbage: dict[str, Any] = dict.fromkeys(ECHO, 7)
    garbage["actions"] = [7, {"impl": 7, "inputSchema": 7, "execution": 7, "pricing": 7}]
    garbage["tool"] = {"bundle": {"archive": 7}, "size": None}
    assert len(run_checks(garbage)) > 10


def test_docs_list_every_check_with_its_rule() -> None:
    from packfixtures import REPO

    doc = (REPO / "docs" / "packs.md").read_text()
    for n, rule in CHECKS.items():
        assert f"| {n} | {rule.replace('|', chr(92) + '|')} |" in doc, n


PUBLIC_NAME = "use a public name such as api.example.com"
NOT_PUBLIC = "it is not a public DNS name under a known public suffix (an IP address, or a private name)"
SPECIAL = "it is a special-use name that no public service answers under"


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("127.0.0.1", NOT_PUBLIC),
        ("2130706433", NOT_PUBLIC),
        ("0", NOT_PUBLIC),
        ("169.254.169.254", NOT_PUBLIC),
        ("intranet", NOT_PUBLIC),
        ("localhost", SPECIAL),
        ("metadata.google.internal", SPECIAL),
        ("printer.local", SPECIAL),
        ("1.0.0.127.in-addr.arpa", SPECIAL),
        ("*.com", "a wildcard must sit under a registered domain, and com is a public suffix or unknown"),
        (
            "*.github.io",
            "a wildcard must sit under a registered domain, and github.io is a public suffix or unknown",
        ),
    ],
)
def test_an_egress_host_that_is_no_public_name_is_refused_at_publish(host: str, why: str) -> None:
    url_host = host.replace("*.", "api.")
    manifest = mutate(
        OM, {"egress": [{"host": host}], "actions[0].impl.request.url": f"https://{url_host}/v1/search"}
    )
    assert [v.message for v in run_checks(manifest)] == [
        f'check 7: egress[0].host "{host}" is not accepted: {why}; {PUBLIC_NAME}'
    ]


@pytest.mark.parametrize(("port", "shown"), [("0", "0"), ("99999", "99999"), ("00", "0")])
def test_an_http_action_url_with_no_real_port_is_refused_at_publish(port: str, shown: str) -> None:
    url = f"https://geocoding-api.open-meteo.com:{port}/v1/search"
    assert [v.message for v in run_checks(mutate(OM, {"actions[0].impl.request.url": url}))] == [
        f'check 11: actions[0].impl.request.url "{url}" is not accepted: its port {shown} is not a port from 1 to 65535'
    ]
    ok = mutate(OM, {"actions[0].impl.request.url": "https://geocoding-api.open-meteo.com:8443/v1/search"})
    assert run_checks(ok) == []
