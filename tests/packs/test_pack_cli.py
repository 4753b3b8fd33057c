"""`b3os keys generate`, `b3os tool build` and `b3os pack verify`, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packfixtures import ECHO_DIR, KID, REPO

B3OS = str(REPO / ".venv" / "bin" / "b3os")


def b3os(*args: str, keys: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "B3OS_KEYS_DIR": str(keys)}
    return subprocess.run([B3OS, *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return tmp_path / "keys"


def test_generate_build_verify(tmp_path: Path, keys: Path) -> None:
    gen = b3os("keys", "generate", "--kid", KID, keys=keys)
    assert gen.returncode == 0, gen.stderr
    lines = gen.stdout.splitlines()
    public = (keys / f"{KID}.pub").read_text().strip()
    assert lines == [f"kid: {KID}", f"public key: {public}"]
    private = (keys / f"{KID}.key").read_text()
    assert "PRIVATE KEY" in private and private not in gen.stdout + gen.stderr

    out = tmp_path / "built"
    build = b3os("tool", "build", str(ECHO_DIR), "--kid", KID, "--out", str(out), keys=keys)
    assert build.returncode == 0, build.stderr
    manifest = json.loads((out / "b3pack.json").read_text())
    assert f"hash: {manifest['signature']['hash']}" in build.stdout
    assert json.loads((ECHO_DIR / "b3pack.json").read_text())["tool"]["bundle"]["archive"]["sha256"] == ""

    ok = b3os("pack", "verify", str(out), keys=keys)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"ok: com.example.tools/echo 1.0.0 {manifest['signature']['hash']} signed by {KID}\n"
    ok2 = b3os("pack", "verify", str(out), "--public-key", public, keys=tmp_path / "empty")
    assert ok2.returncode == 0, ok2.stderr

    script = out / "tool" / "bin" / "echo-tool"
    script.write_bytes(script.read_bytes() + b"\n")
    bad = b3os("pack", "verify", str(out), keys=keys)
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.startswith(f"b3os pack verify: {out} does not verify:\n")
    assert "tool.bundle.archive.sha256 is '" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_build_prints_every_violation_and_exits_1(tmp_path: Path, keys: Path) -> None:
    b3os("keys", "generate", "--kid", KID, keys=keys)
    pack = tmp_path / "echo"
    import shutil

    shutil.copytree(ECHO_DIR, pack, ignore=shutil.ignore_patterns(".b3os-build"))
    m = json.loads((pack / "b3pack.json").read_text())
    m["tool"]["size"] = {"vcpu": 2, "memoryMb": 512}
    m["tool"]["network"] = {"mode": "caller"}
    (pack / "b3pack.json").write_text(json.dumps(m))
    res = b3os("tool", "build", str(pack), "--kid", KID, keys=keys)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"b3os tool build: {pack} fails 2 publish check(s):",
        '  check 14: tool.size {"vcpu": 2, "memoryMb": 512} is not accepted in this version: '
        'omit it or use {"vcpu": 1, "memoryMb": 512}',
        '  check 15: tool.network {"mode": "caller"} is not accepted in this version: '
        'omit it or use {"mode": "none"}: a tool has no network',
    ]


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["keys", "generate", "--kid", "nonamespace"],
            "b3os keys generate: key id 'nonamespace' is not accepted",
        ),
        (
            ["tool", "build", "/no/such/pack", "--kid", KID],
            "b3os tool build: /no/such/pack is not a directory",
        ),
        (["tool", "build", str(ECHO_DIR), "--kid", KID], f"b3os tool build: no private key for {KID} in "),
        (
            ["pack", "verify", "/no/such/pack"],
            "b3os pack verify: /no/such/pack does not verify:\n  /no/such/pack is not",
        ),
    ],
)
def test_errors_are_sentences_not_tracebacks(keys: Path, args: list[str], stderr: str) -> None:
    res = b3os(*args, keys=keys)
    assert res.returncode == 1
    assert res.stderr.startswith(stderr)
    assert "Traceback" not in res.stderr


def test_an_existing_key_is_never_overwritten(keys: Path) -> None:
    assert b3os("keys", "generate", "--kid", KID, keys=keys).returncode == 0
    before = (keys / f"{KID}.key").read_bytes()
    again = b3os("keys", "generate", "--kid", KID, keys=keys)
    assert again.returncode == 1
    assert again.stderr == f"b3os keys generate: key {KID} already exists in {keys}: choose another key id\n"
    assert (keys / f"{KID}.key").read_bytes() == before
