"""`b3os routine validate`: exit codes, problem lines, local packs, and the registry over HTTP.

The registry here is a STAND-IN served on 127.0.0.1 with the api's route shapes
(`GET .../versions` -> `{"pack", "versions": [{"version", ...}]}` newest first, `GET .../manifest` ->
the manifest), until publishing through the real api is simple enough for a test of this area.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from loopback import send_json

from packs.manifest import parse_manifest
from packs.refs import ActionRef
from packs.resolve import ResolveError, resolve

REPO = Path(__file__).resolve().parents[2]
ECHO_DIR = REPO / "examples" / "tools" / "echo"
KEY = "b3os_test_key_not_a_secret"

GOOD = """\
name: ok
steps:
  - id: a
    uses: com.example.tools/echo/echo@1
    with:
      text: hi
"""

BAD_WITH = """\
name: bad-with
steps:
  - id: a
    uses: com.example.tools/echo/echo@1
    with:
      text: 42
      colour: red
  - id: b
    uses: com.example.tools/echo/shout@1
"""


def b3os(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    return subprocess.run(
        [sys.executable, "-m", "cli", "routine", "validate", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, **(env or {})},
        timeout=60,
    )


def test_good_files_print_ok_and_exit_0(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.replace("name: ok", "name: ok-too"))
    out = b3os("a.yaml", "b.yaml", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "a.yaml: ok\nb.yaml: ok\n", "")


def test_bad_file_prints_every_problem_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text("name: x\nsteps:\n  - id: a-b\n    uses: nope\n    timeout: soon\n")
    out = b3os("bad.yaml", "good.yaml", "missing.yaml", cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "bad.yaml:3:9",
        "bad.yaml:4:11",
        "bad.yaml:5:14",
        "good.yaml",
        "missing.yaml:1:1",
    ]
    assert "step id 'a-b' is not accepted" in lines[0]
    assert "action ref 'nope' has no version" in lines[1]
    assert "'soon' is not a duration" in lines[2]
    assert lines[3] == "good.yaml: ok"
    assert lines[4].startswith("missing.yaml:1:1: cannot read the file:")
    assert "Traceback" not in out.stderr


def test_packs_option_checks_with_values_against_a_local_pack(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(BAD_WITH)
    out = b3os("--packs", str(ECHO_DIR), "r.yaml", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "r.yaml:6:13: step 'a': with.text: 42 is not of type 'string'",
        "r.yaml:7:7: step 'a': with: com.example.tools/echo/echo@1 has no input 'colour' "
        "(inputs: text, file)",
        "r.yaml:9:11: step 'b': uses: cannot resolve com.example.tools/echo/shout@1: "
        "com.example.tools/echo@1.0.0 has no action 'shout' (actions: noop, echo, fail)",
    ]
    assert b3os("--offline", "r.yaml", cwd=tmp_path).returncode == 0


def test_packs_option_with_a_directory_without_manifest_is_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD)
    out = b3os("--packs", str(tmp_path), "r.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("b3os routine validate: cannot read the pack manifest")
    assert "Traceback" not in out.stderr


class Registry:
    """The stand-in registry: records requests, checks the key, serves the echo pack in three versions."""

    def __init__(self) -> None:
        manifest = json.loads((ECHO_DIR / "b3pack.json").read_text())
        self.manifests = {v: {**copy.deepcopy(manifest), "version": v} for v in ("2.0.0", "1.2.0", "1.0.0")}
        # 1.2.0 lost the file input: a ref @1 must be checked against it
        for action in self.manifests["1.2.0"]["actions"]:
            if action["key"] == "echo":
                action["inputSchema"] = {**action["inputSchema"], "properties": {"text": {"type": "string"}}}
        self.paths: list[str] = []
        self.auth: list[str | None] = []


@pytest.fixture
def registry() -> Iterator[tuple[str, Registry]]:
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            state.paths.append(self.path)
            state.auth.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                return self._send(
                    401, {"error": {"code": "unauthorized", "message": "the API key is not valid"}}
                )
            url = urlsplit(self.path)
            if url.path != "/v1/actions/resolve":
                return self._send(404, {"error": {"code": "not_found", "message": "no such endpoint"}})
            ref = parse_qs(url.query)["ref"][0]
            parsed = ActionRef.parse(ref)
            versions = state.manifests if parsed.pack == "com.example.tools/echo" else {}
            try:  # what the api answers: the one rule over its versions
                found = resolve(parsed, versions, lambda v: parse_manifest(versions[v]))
            except ResolveError as exc:
                return self._send(404, {"error": {"code": "not_found", "message": f"{ref}: {exc}"}})
            action = {"key": found.action.key, "inputSchema": found.action.input_schema}
            return self._send(200, {"ref": ref, "pin": found.pin, "action": action})

        def _send(self, status: int, body: object) -> None:
            send_json(self, status, body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


ROUTINE_FOR_REGISTRY = """\
name: registry
steps:
  - id: a
    uses: com.example.tools/echo/echo@1
    with:
      text: hi
      file: {"$bytes": "aGk=", "name": "a.txt"}
  - id: b
    uses: com.example.tools/echo/echo@1.0.0
    with:
      text: hi
      file: {"$bytes": "aGk=", "name": "a.txt"}
  - id: c
    uses: com.example.tools/other/echo@1
"""


def test_registry_from_environment_resolves_newest_of_the_major(
    tmp_path: Path, registry: tuple[str, Registry]
) -> None:
    url, state = registry
    (tmp_path / "r.yaml").write_text(ROUTINE_FOR_REGISTRY)
    out = b3os("r.yaml", cwd=tmp_path, env={"B3OS_API_URL": url, "B3OS_API_KEY": KEY})
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        "r.yaml:7:7: step 'a': with: com.example.tools/echo/echo@1 has no input 'file' (inputs: text)",
        "r.yaml:14:11: step 'c': uses: cannot resolve com.example.tools/other/echo@1: "
        "pack com.example.tools/other is not in the registry",
    ]
    assert state.paths == [
        "/v1/actions/resolve?ref=com.example.tools%2Fecho%2Fecho%401",
        "/v1/actions/resolve?ref=com.example.tools%2Fecho%2Fecho%401.0.0",
        "/v1/actions/resolve?ref=com.example.tools%2Fother%2Fecho%401",
    ]
    assert KEY not in out.stdout + out.stderr


def test_registry_settings_come_from_dev_env_and_a_wrong_key_is_reported(
    tmp_path: Path, registry: tuple[str, Registry]
) -> None:
    url, state = registry
    (tmp_path / ".b3os").mkdir()
    (tmp_path / ".b3os" / "dev.env").write_text(f"# dev\nB3OS_API_URL={url}\nexport B3OS_API_KEY='wrong'\n")
    (tmp_path / "r.yaml").write_text(GOOD)
    out = b3os("r.yaml", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout == (
        "r.yaml:4:11: step 'a': uses: cannot resolve com.example.tools/echo/echo@1: "
        "the registry refused the API key (401: the API key is not valid)\n"
    )
    assert state.auth == ["Bearer wrong"]


def test_unreachable_registry_is_a_sentence_per_ref(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD)
    out = b3os("r.yaml", cwd=tmp_path, env={"B3OS_API_URL": "http://127.0.0.1:9", "B3OS_API_KEY": KEY})
    assert out.returncode == 1
    assert out.stdout == (
        "r.yaml:4:11: step 'a': uses: cannot resolve com.example.tools/echo/echo@1: "
        "the registry at http://127.0.0.1:9 cannot be reached (ConnectError)\n"
    )
