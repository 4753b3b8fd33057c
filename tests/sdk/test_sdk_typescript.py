"""The TypeScript SDK (`@b3os/sdk`, sdk/typescript) against the real stack: the seed's snippet as written,
a call with files, a 429 retried with the same key, typed errors, a routine run followed step by step; and
its types, generated from the server's OpenAPI document, checked to be what the server serves now.

Its wire behaviour against a local HTTP server is tested by its own tests (`npm test`, sdk/typescript/test).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from realstack import RoutineStack

from . import routines
from .typescript_sdk import SDK, openapi_text, run_typescript
from .upstreams import PUBLIC, SEARCH, geo_answers, json_reply, scripted

SEED_SNIPPET = """\
import { B3OS } from "@b3os/sdk";
const b3os = new B3OS();
const pack = await b3os.actions.getPack("io.b3os", "open-meteo");
console.log(pack.version, pack.actions.map((a) => a.key));
const manifest = await b3os.actions.getPackManifest("io.b3os", "open-meteo", pack.version);
console.log(manifest.egress);
"""
PROGRAMS = Path(__file__).parent / "ts"
STALE = "the server's OpenAPI document changed: run `make sdk-types` and commit sdk/typescript"


def _env(stack: RoutineStack, key: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    return {**env, "B3OS_API_URL": stack.url, "B3OS_API_KEY": key, **extra}


def _lines(done: subprocess.CompletedProcess[str]) -> list[Any]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_committed_openapi_document_is_the_one_the_server_makes() -> None:
    assert (SDK / "openapi.json").read_text() == openapi_text(), STALE


def test_the_committed_types_are_what_openapi_typescript_makes_of_the_servers_document(
    typescript_tools: Path, tmp_path: Path
) -> None:
    (tmp_path / "openapi.json").write_text(openapi_text())
    generator = typescript_tools / "node_modules" / ".bin" / "openapi-typescript"
    generate = [generator, "openapi.json", "-o", "schema.ts"]
    done = subprocess.run(generate, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (typescript_tools / "src" / "schema.ts").read_text() == (tmp_path / "schema.ts").read_text(), STALE


def test_the_seed_snippet_runs_as_written(stack: RoutineStack, typescript_sdk: Path, tmp_path: Path) -> None:
    done = run_typescript(SEED_SNIPPET, tmp_path, _env(stack, stack.org().key))
    assert done.returncode == 0, done.stderr
    # what the Python snippet prints (`1.0.0 ['search-places']`, `[{'host': ...}]`), as node prints it
    assert done.stdout.splitlines() == [
        "1.0.0 [ 'search-places' ]",
        "[ { host: 'geocoding-api.open-meteo.com' } ]",
    ]


def test_calls_send_files_retry_with_the_same_key_and_throw_typed_errors(
    stack: RoutineStack, typescript_sdk: Path, tmp_path: Path
) -> None:
    geo_answers(stack)
    arrived = scripted(
        stack,
        "/public/ts-busy-once",
        [json_reply({"message": "slow down"}, 429, [("Retry-After", "1")]), json_reply({"ok": True})],
    )
    org = stack.org()
    done = run_typescript(PROGRAMS / "calls.ts", tmp_path, _env(stack, org.key, SEARCH=SEARCH, PUBLIC=PUBLIC))
    echoed, places, retried, short, missing, forbidden, units = _lines(done)
    assert echoed == ["com.example.tools/echo/echo@1.0.0", "vm", "hi", "hello.txt", "hello\n"]
    assert places == ["Berlin", {"compute": 0, "floor": 10, "price": 0, "total": 10}]
    call_id, output, retries = retried
    assert output == {"ok": True}
    [[attempt, wait_s, key, code, reason]] = retries
    assert (attempt, wait_s, code, reason) == (1, 1, "rate_limited", "upstream")
    assert len(arrived) == 2 and arrived[1] - arrived[0] >= 1.0
    # one key, made for this call, sent both times; the answer stored under it is the one that succeeded
    assert key.startswith("b3os-sdk-") and stack.stored_keys(org)[key] == call_id
    assert short == [
        400,
        "invalid_request",
        "input.name: 'B' is too short",
        None,
        "input.name: 'B' is too short (400 invalid_request)",
    ]
    assert missing == ["not_found", "action"]
    assert forbidden == [403, "routines:read"]
    assert units["actions.tool_call"] == 1 and units["actions.call"] == 2  # the retried call charged once


GREET = routines.greet("ts-greet")


def test_a_routine_is_stored_run_followed_step_by_step_and_rerun(
    stack: RoutineStack, typescript_sdk: Path, tmp_path: Path
) -> None:
    done = run_typescript(PROGRAMS / "runs.ts", tmp_path, _env(stack, stack.runner().key, GREET=GREET))
    stored, started, finished, rerun, cancel, ceiling = _lines(done)
    assert stored == ["ts-greet", 1, ["greet", "twice", "loud"], 1]
    assert started == ["running", True]  # the same key: the same run
    assert finished == [
        "succeeded",
        {"said": "hello ann!"},
        [
            ["greet", "succeeded", {"text": "hello ann"}],
            ["twice", "succeeded", {"text": "hello ann!"}],
            ["loud", "skipped", None],
        ],
    ]
    assert rerun == [True, "succeeded", True, None]  # greet kept, twice called again
    assert cancel == [409, "conflict"]
    # free echo calls: each at most 234 of compute and 10 of floor, 3 attempts; loud counted as taken
    assert ceiling == [2196, [["greet", 732], ["twice", 732], ["loud", 732]], "max_cost", "max_cost_microusd"]
