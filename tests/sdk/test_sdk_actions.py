"""The SDK's registry and call methods against the real stack: the seed's snippet as written, tool calls
with files, an HTTP action through the egress proxy, and AsyncB3OS."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

from realstack import FREE_ECHO, RoutineStack

from b3os import B3OS, AsyncB3OS

from .upstreams import SEARCH, geo_answers

SEED_SNIPPET = """\
from b3os import B3OS
b3os = B3OS()
pack = b3os.actions.get_pack("io.b3os", "open-meteo")
print(pack["version"], [a["key"] for a in pack["actions"]])
manifest = b3os.actions.get_pack_manifest("io.b3os", "open-meteo", pack["version"])
print(manifest["egress"])
"""
ECHO = "com.example.tools/echo/echo@1"


def test_the_seed_snippet_runs_as_written(stack: RoutineStack, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=stack.org().key)
    argv = [sys.executable, "-c", SEED_SNIPPET]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "1.0.0 ['search-places']",
        "[{'host': 'geocoding-api.open-meteo.com'}]",
    ]


def test_the_registry_lists_packs_versions_tools_and_resolves_a_ref(stack: RoutineStack) -> None:
    with B3OS(stack.url, stack.org().key) as b3os:
        packs = {p["pack"]: p for p in b3os.actions.list_packs()}
        assert {"io.b3os/open-meteo", "com.example.tools/echo", "com.example.tools/probe"} <= set(packs)
        assert [a["ref"] for a in packs["io.b3os/open-meteo"]["actions"]] == [
            "io.b3os/open-meteo/search-places@1.0.0"
        ]
        assert [v["version"] for v in b3os.actions.list_versions("io.b3os", "open-meteo")] == ["1.0.0"]
        tools = b3os.actions.list_tools("com.example.tools", "echo")
        assert [t["name"] for t in tools] == ["echo__noop", "echo__echo", "echo__fail"]
        resolved = b3os.actions.resolve("io.b3os/open-meteo/search-places@1")
        assert (resolved["pin"], resolved["kind"]) == ("io.b3os/open-meteo/search-places@1.0.0", "http")
        assert resolved["action"]["inputSchema"]["required"] == ["name"]


def test_a_tool_call_sends_a_file_from_bytes_and_from_a_path(stack: RoutineStack, tmp_path: Path) -> None:
    org = stack.org()
    with B3OS(stack.url, org.key) as b3os:
        answer = b3os.actions.call(ECHO, {"text": "hi"}, files={"file": b"hello\n"})
        assert answer["ref"] == "com.example.tools/echo/echo@1.0.0" and answer["tier"] == "vm"
        out = answer["output"]
        assert out["text"] == "hi"
        assert (out["file"]["name"], out["file"]["bytes"]) == ("file", 6)
        assert base64.b64decode(out["file"]["$bytes"]) == b"hello\n"
        notes = tmp_path / "notes.txt"
        notes.write_bytes(b"\x00binary\xff")
        answer = b3os.actions.call(ECHO, {"text": "again"}, files={"file": notes}, idempotency_key="sdk-path")
        out = answer["output"]["file"]
        assert (out["name"], out["bytes"]) == ("notes.txt", 8)
        assert base64.b64decode(out["$bytes"]) == b"\x00binary\xff"
        # the same key and request: the stored answer, charged once
        again = b3os.actions.call(ECHO, {"text": "again"}, files={"file": notes}, idempotency_key="sdk-path")
        assert again["call_id"] == answer["call_id"]
        usage = b3os.usage()
    assert usage["units"]["actions.tool_call"] == 2
    assert len(stack.calls_of(org)) == 2


def test_an_http_action_call_answers_through_the_egress_proxy(stack: RoutineStack) -> None:
    geo = geo_answers(stack)
    with B3OS(stack.url, stack.org().key) as b3os:
        answer = b3os.actions.call(SEARCH, {"name": "Berlin"})
    assert answer["tier"] == "http" and answer["ref"] == "io.b3os/open-meteo/search-places@1.0.0"
    assert answer["output"]["places"][0]["name"] == "Berlin"
    assert answer["cost"] == {"compute": 0, "floor": 10, "price": 0, "total": 10}
    assert geo.requests[-1].query["name"] == ["Berlin"]


async def test_async_b3os_calls_an_action(stack: RoutineStack) -> None:
    org = stack.org()
    async with AsyncB3OS(stack.url, org.key) as b3os:
        answer = await b3os.actions.call(FREE_ECHO, {"text": "async"}, files={"file": ("a.txt", b"abc")})
        pack = await b3os.actions.get_pack("com.example.tools", "free")
    assert answer["output"]["text"] == "async"
    assert base64.b64decode(answer["output"]["file"]["$bytes"]) == b"abc"
    assert answer["ref"] == f"com.example.tools/free/echo@{pack['version']}"
