"""The echo tool's script under the json-stdio contract: unpacked from its archive into a bubblewrap
sandbox with /tool read-only, /in, /out and /work, no network, as a node runs it (without the VM)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packfixtures import ECHO_DIR

from packs.archive import build_archive, unpack_archive

BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("echo-vm")
    data, stats = build_archive(ECHO_DIR / "tool")
    unpack_archive(data, root / "tool", max_unpacked_bytes=stats.unpacked_bytes, max_entries=stats.entries)
    return root


def call(sandbox: Path, action: str, input_: dict[str, Any], files: dict[str, bytes] | None = None):  # type: ignore[no-untyped-def]
    for d in ("in", "out", "work"):
        shutil.rmtree(sandbox / d, ignore_errors=True)
        (sandbox / d).mkdir()
    for field, (name, data) in (files or {}).items():
        (sandbox / "in" / field).mkdir()
        (sandbox / "in" / field / name).write_bytes(data)
    request = {
        "action": action,
        "input": input_,
        "limits": {"timeoutMs": 10000, "maxOutputBytes": 262144},
        "call": {"id": "tcall_test"},
    }
    cmd = [BWRAP, "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
           "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--ro-bind", "/etc", "/etc",
           "--ro-bind", str(sandbox / "tool"), "/tool", "--ro-bind", str(sandbox / "in"), "/in",
           "--bind", str(sandbox / "out"), "/out", "--bind", str(sandbox / "work"), "/work",
           "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid", "--die-with-parent",
           "--chdir", "/work", "/tool/bin/echo-tool", action]  # fmt: skip
    proc = subprocess.run(cmd, input=json.dumps(request).encode(), capture_output=True, timeout=30)
    return proc


def last_line(proc: subprocess.CompletedProcess[bytes]) -> Any:
    return json.loads(proc.stdout.decode().rstrip("\n").split("\n")[-1])


def test_noop_answers_an_empty_object(sandbox: Path) -> None:
    proc = call(sandbox, "noop", {})
    assert (proc.returncode, proc.stdout) == (0, b'{"output":{}}\n')


def test_echo_returns_text_and_its_file(sandbox: Path) -> None:
    file = {"path": "/in/file/hello.txt", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"}
    proc = call(sandbox, "echo", {"text": 'hi "there"\n', "file": file}, {"file": ("hello.txt", b"hello\n")})
    assert proc.returncode == 0
    assert last_line(proc) == {"output": {"text": 'hi "there"\n', "file": {"path": "/out/hello.txt"}}}
    assert (sandbox / "out" / "hello.txt").read_bytes() == b"hello\n"


def test_echo_without_a_file(sandbox: Path) -> None:
    proc = call(sandbox, "echo", {"text": "hi"})
    assert last_line(proc) == {"output": {"text": "hi"}}
    assert list((sandbox / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("input_", "expected"),
    [
        (
            {"mode": "tool_error", "code": "asked", "message": "failing as asked", "retryable": True},
            {"error": {"code": "asked", "message": "failing as asked", "retryable": True}},
        ),
        (
            {"mode": "tool_error"},
            {
                "error": {
                    "code": "echo_failed",
                    "message": "the echo tool failed as asked",
                    "retryable": False,
                }
            },
        ),
        ({"mode": "bad_output"}, {"output": {"unexpected": True}}),
        ({"mode": "bad_file"}, {"output": {"file": {"path": "/out/missing.txt"}}}),
        ({"mode": "sleep", "seconds": 1}, {"output": {}}),
    ],
)
def test_fail_answers_as_asked(sandbox: Path, input_: dict[str, Any], expected: Any) -> None:
    proc = call(sandbox, "fail", input_)
    assert proc.returncode == 0
    assert last_line(proc) == expected


def test_fail_exits_with_the_code_asked(sandbox: Path) -> None:
    assert call(sandbox, "fail", {"mode": "exit", "exitCode": 7}).returncode == 7
    assert call(sandbox, "fail", {"mode": "exit"}).returncode == 3


def test_fail_kills_itself_with_the_signal_asked(sandbox: Path) -> None:
    # bubblewrap reports a child killed by signal N as 128 + N.
    assert call(sandbox, "fail", {"mode": "signal"}).returncode == 128 + 9
    assert call(sandbox, "fail", {"mode": "signal", "signal": "TERM"}).returncode == 128 + 15


def test_fail_breaks_the_last_line(sandbox: Path) -> None:
    proc = call(sandbox, "fail", {"mode": "bad_last_line"})
    assert proc.stdout.decode().splitlines() == ['{"output":{}}', "this last line is not JSON"]


def test_fail_writes_more_than_a_mebibyte(sandbox: Path) -> None:
    proc = call(sandbox, "fail", {"mode": "huge_output"})
    assert len(proc.stdout) > 1024 * 1024
    assert last_line(proc) == {"output": {}}


def test_an_unknown_action_is_a_tool_error(sandbox: Path) -> None:
    proc = call(sandbox, "nope", {})
    assert last_line(proc)["error"]["code"] == "unknown_action"


def test_the_fixtures_match_the_actions() -> None:
    manifest = json.loads((ECHO_DIR / "b3pack.json").read_text())
    keys = {a["key"] for a in manifest["actions"]}
    for path in sorted((ECHO_DIR / "fixtures").glob("*.json")):
        fixture = json.loads(path.read_text())
        assert fixture["action"] in keys, path.name
