"""`b3os call` and `b3os tool earnings` against the real stack."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from b3os import B3OS
from cli._http import CliError
from cli.call import call_with_retries, declared_files, write_files

from .calltest import call, running
from .stack import FREE, NAMESPACE, REPO, Org, Stack


def b3os(stack: Stack, org: Org, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=org.key, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_b3os_call_prints_the_output_and_writes_the_output_file(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_bytes(b"hello\n")
    out = tmp_path / "out"
    done = b3os(
        stack,
        stack.org(),
        "call",
        "com.example.tools/echo/echo@1",
        "--input",
        '{"text": "hi"}',
        "--file",
        "file=hello.txt",
        "--out-dir",
        str(out),
        "--idempotency-key",
        "cli-1",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "text": "hi",
        "file": {
            "name": "hello.txt",
            "bytes": 6,
            "contentType": "text/plain",
            "path": str(out / "hello.txt"),
        },
    }
    assert (out / "hello.txt").read_bytes() == b"hello\n"
    assert "micro-USD (compute" in done.stderr and "price 100)" in done.stderr


def test_b3os_call_never_writes_over_a_file_without_force_nor_through_a_symlink(
    stack: Stack, tmp_path: Path
) -> None:
    (tmp_path / "hello.txt").write_bytes(b"new\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "hello.txt").write_bytes(b"mine\n")
    org = stack.org()
    args = ["call", "com.example.tools/echo/echo@1", "--input", '{"text": "hi"}', "--file", "file=hello.txt"]
    done = b3os(stack, org, *args, "--out-dir", str(out), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"b3os call: {out / 'hello.txt'} exists; nothing written (--force replaces it)"
    )
    assert (out / "hello.txt").read_bytes() == b"mine\n"
    done = b3os(stack, org, *args, "--out-dir", str(out), "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "hello.txt").read_bytes() == b"new\n"
    # a symlink where the file goes is refused, and with --force replaced, never written through
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"keep\n")
    (out / "hello.txt").unlink()
    (out / "hello.txt").symlink_to(elsewhere)
    assert b3os(stack, org, *args, "--out-dir", str(out), cwd=tmp_path).returncode == 1
    assert b3os(stack, org, *args, "--out-dir", str(out), "--force", cwd=tmp_path).returncode == 0
    assert not (out / "hello.txt").is_symlink() and (out / "hello.txt").read_bytes() == b"new\n"
    assert elsewhere.read_bytes() == b"keep\n"


def test_only_the_outputs_the_action_declares_as_files_are_written(stack: Stack, tmp_path: Path) -> None:
    answer = {"ref": "com.example.tools/echo/echo@1.0.0", "output": {"text": "x", "file": _file("a.txt")}}
    with B3OS(stack.url, stack.org().key) as client:
        assert declared_files(client, answer) == {"file"}
        nothing = {"ref": "nowhere", "output": {"text": "x"}}
        assert declared_files(client, nothing) == set()  # no file value: the registry is not asked
    # what a tool printed as a file in a property not declared as one is shown, never written
    output = {"file": _file("a.txt"), "note": _file("Makefile"), "more": [_file("b.txt")]}
    shown = write_files(output, tmp_path, {"file"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert shown["note"] == output["note"] and shown["more"] == output["more"]
    assert shown["file"]["path"] == str(tmp_path / "a.txt")
    # checked before any is written: a bad name, or two files of one name, write nothing
    for bad in (
        {"file": _file("c.txt"), "other": _file("../x")},
        {"file": _file("d.txt"), "other": _file("d.txt")},
    ):
        with pytest.raises(CliError, match="nothing written"):
            write_files(bad, tmp_path, {"file", "other"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    with pytest.raises(CliError) as refused:
        write_files({"file": _file("\x1b[2J\u202e" + "x" * 500)}, tmp_path, {"file"})
    assert "\x1b" not in str(refused.value) and "\u202e" not in str(refused.value)
    assert len(str(refused.value)) < 200


def _file(name: str) -> dict[str, Any]:
    return {"$bytes": base64.b64encode(name.encode()).decode(), "name": name}


def test_b3os_call_says_what_is_wrong_without_a_traceback(stack: Stack, tmp_path: Path) -> None:
    org = stack.org()
    done = b3os(stack, org, "call", "com.example.tools/echo/echo@1", "--input", '{"text": 5}', cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("b3os call: input.text: 5 is not of type 'string' (400 invalid_request)")
    done = b3os(
        stack, org, "call", "com.example.tools/echo/echo@1", "--file", "file=missing.txt", cwd=tmp_path
    )
    assert done.returncode == 1 and "cannot read missing.txt" in done.stderr
    assert "Traceback" not in done.stderr


def test_b3os_call_waits_exactly_retry_after_and_sends_the_call_again(stack: Stack) -> None:
    org = stack.org()
    slow = [
        threading.Thread(target=call, args=(stack, org, f"{FREE}/fail@1", {"mode": "sleep", "seconds": 1}))
        for _ in range(4)
    ]
    for t in slow:
        t.start()
    waits: list[float] = []
    said: list[str] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        for t in slow:  # the slots free when the running calls end, well before Retry-After
            t.join()

    try:
        while running(stack, org) < 4:
            time.sleep(0.02)
        with B3OS(stack.url, org.key) as client:
            answer = call_with_retries(
                client,
                {"ref": f"{FREE}/noop@1", "input": {}},
                key=None,
                max_retries=3,
                max_wait=60,
                say=said.append,
                sleep=sleep,
            )
    finally:
        for t in slow:
            t.join()
    assert answer["output"] == {}
    assert len(waits) == 1 and 1 <= waits[0] <= 16
    assert said[0].startswith("b3os call: this organization already runs 4 calls at once")
    assert said[0].endswith(f"retrying in {int(waits[0])} s (retry 1 of 3)")


def test_b3os_tool_earnings_shows_the_publisher_its_month(stack: Stack, tmp_path: Path) -> None:
    assert stack.publisher is not None
    assert call(stack, stack.org(), "com.example.tools/echo/noop@1").status_code == 200
    done = b3os(stack, stack.publisher, "tool", "earnings", "--namespace", NAMESPACE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{NAMESPACE} earnings for ")
    assert lines[1].startswith("rate: 0% until ")
    assert any("echo__noop" in line for line in lines[3:-1])
    assert lines[-1].startswith("total")
    # earnings need their scope, and are only the publisher's own
    other = b3os(stack, stack.org(), "tool", "earnings", "--namespace", NAMESPACE, cwd=tmp_path)
    assert other.returncode == 1 and "This key lacks the scope earnings:read" in other.stderr
    other = b3os(
        stack, stack.org(scopes=["earnings:read"]), "tool", "earnings", "--namespace", NAMESPACE, cwd=tmp_path
    )
    assert other.returncode == 1
    assert "Your organization has no publisher namespace com.example.tools" in other.stderr
