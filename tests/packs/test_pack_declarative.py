"""Building declarative packs (no tool section): the example packs, `b3os pack build`, verify and bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packfixtures import ECHO_DIR, KID, REPO

from packs.build import build_pack
from packs.checks import run_checks
from packs.errors import BuildError, ChecksFailed, ManifestError
from packs.loader import load_built_bundle
from packs.signing import generate_key, public_key_b64
from packs.verify import verify_pack_dir

B3OS = str(REPO / ".venv" / "bin" / "b3os")
EXAMPLES = REPO / "examples" / "packs"
GET_ISSUE_FIXTURE = (
    '{"action": "get-issue", "input": {"owner": "o", "repo": "r", "number": 1}, "output": {"number": 1, '
    '"title": "a bug", "state": "open", "url": "https://github.com/o/r/issues/1", "author": "ann", '
    '"labels": []}}\n'
)
"""A fixture of get-issue that passes check 41 (a fixture fits its action's schemas)."""
IO_KID = "io.b3os#test"


def b3os(*args: str, keys: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "B3OS_KEYS_DIR": str(keys)}
    return subprocess.run([B3OS, *args], capture_output=True, text=True, env=env, timeout=60)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def github(tmp_path: Path) -> Path:
    """A copy of examples/packs/github with a NOTICES.md and one fixture."""
    root = tmp_path / "github"
    shutil.copytree(EXAMPLES / "github", root)
    (root / "NOTICES.md").write_text("GitHub is a trademark of GitHub, Inc.\n")
    (root / "fixtures").mkdir()
    (root / "fixtures" / "get-issue.json").write_text(GET_ISSUE_FIXTURE)
    return root


@pytest.mark.parametrize("name", ["open-meteo", "github"])
def test_each_example_pack_builds_with_a_throwaway_key_and_passes_every_check(
    name: str, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    out = tmp_path / "built"
    result = build_pack(EXAMPLES / name, kid=IO_KID, private_key=key, out_dir=out)
    # github's js, open-meteo's fixtures
    code = {
        p.relative_to(EXAMPLES / name).as_posix(): p.read_bytes()
        for part in ("js", "fixtures")
        for p in sorted((EXAMPLES / name / part).glob("*"))
    }
    assert result.archive is None and result.archive_path is None
    assert [f.path for f in result.files] == sorted(code)
    assert tree(out) == {"b3pack.json": result.manifest_path.read_bytes(), **code}
    assert run_checks(result.manifest) == []
    report = verify_pack_dir(out, public_key_b64=public_key_b64(key))
    assert report.problems == [] and report.hash == result.hash
    manifest, files = load_built_bundle(out)
    assert manifest == result.manifest and files == code
    unsigned = json.loads((EXAMPLES / name / "b3pack.json").read_text())
    assert {k: v for k, v in manifest.items() if k != "signature"} == unsigned


def test_pack_build_is_byte_identical_twice_and_pack_verify_accepts_it(github: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert b3os("keys", "generate", "--kid", IO_KID, keys=keys).returncode == 0
    outs = [tmp_path / "one", tmp_path / "two"]
    for out in outs:
        built = b3os("pack", "build", str(github), "--kid", IO_KID, "--out", str(out), keys=keys)
        assert built.returncode == 0, built.stderr
    manifest = json.loads((outs[0] / "b3pack.json").read_text())
    hash_ = manifest["signature"]["hash"]
    assert built.stdout.splitlines() == [
        "built io.b3os/github 1.0.0",
        f"manifest: {outs[1] / 'b3pack.json'}",
        f"hash: {hash_}",
        f"signed by: {IO_KID}",
    ]
    assert tree(outs[0]) == tree(outs[1])
    assert sorted(tree(outs[0])) == [
        "NOTICES.md",
        "b3pack.json",
        "fixtures/get-issue.json",
        "js/issues.js",
        "js/links.js",
    ]
    assert "signature" not in json.loads((github / "b3pack.json").read_text()), "--out leaves DIR as it is"
    ok = b3os("pack", "verify", str(outs[0]), keys=keys)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"ok: io.b3os/github 1.0.0 {hash_} signed by {IO_KID}\n"
    _, files = load_built_bundle(outs[0])
    assert sorted(files) == ["NOTICES.md", "fixtures/get-issue.json", "js/issues.js", "js/links.js"]
    # The notices file is signed: changing it after the build fails verify.
    (outs[0] / "NOTICES.md").write_text("other\n")
    bad = b3os("pack", "verify", str(outs[0]), keys=keys)
    assert bad.returncode == 1 and "does not match signature.hash" in bad.stderr


def test_a_declarative_pack_builds_in_place_and_again_to_the_same_hash(github: Path, keys_dir: Path) -> None:
    generate_key(IO_KID, keys_dir)
    first = build_pack(github, kid=IO_KID)
    assert json.loads((github / "b3pack.json").read_text())["signature"]["hash"] == first.hash
    assert not (github / ".b3os-build").exists()
    assert verify_pack_dir(github).problems == []
    assert build_pack(github, kid=IO_KID).hash == first.hash


def test_out_replaces_an_earlier_declarative_build_but_not_other_files(github: Path, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    out = tmp_path / "out"
    build_pack(github, kid=IO_KID, private_key=key, out_dir=out)
    (out / "fixtures" / "stale.json").write_text("{}")
    build_pack(github, kid=IO_KID, private_key=key, out_dir=out)
    assert not (out / "fixtures" / "stale.json").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "b3pack.json").write_text("{}")  # an unsigned manifest is no earlier build
    with pytest.raises(BuildError, match="is not empty and holds no earlier build"):
        build_pack(github, kid=IO_KID, private_key=key, out_dir=other)
    assert (other / "b3pack.json").read_text() == "{}"


def test_an_unbuilt_declarative_pack_is_not_published(github: Path) -> None:
    with pytest.raises(
        ManifestError, match=r"b3pack.json is not signed: build the pack first with `b3os pack build"
    ):
        load_built_bundle(github)


def test_tool_build_refuses_a_declarative_pack_naming_pack_build(github: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="has no tool section: `b3os tool build` builds tool packs"):
        build_pack(github, kid=IO_KID, private_key=Ed25519PrivateKey.generate(), tool=True)
    res = b3os("tool", "build", str(github), "--kid", IO_KID, keys=tmp_path / "keys")
    assert res.returncode == 1
    assert res.stderr == (
        f"b3os tool build: {github / 'b3pack.json'} has no tool section: `b3os tool build` builds tool "
        "packs; build a declarative pack with `b3os pack build`\n"
    )


def test_pack_build_prints_every_violation_and_exits_1(github: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    b3os("keys", "generate", "--kid", IO_KID, keys=keys)
    m = json.loads((github / "b3pack.json").read_text())
    m["connections"][0]["hosts"] = ["uploads.github.com"]
    m["actions"][0]["impl"]["request"]["url"] = "https://${{ input.host }}/issues"
    (github / "b3pack.json").write_text(json.dumps(m))
    res = b3os("pack", "build", str(github), "--kid", IO_KID, keys=keys)
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert lines[0] == f"b3os pack build: {github} fails 2 publish check(s):"
    assert [line.split(":")[0] for line in lines[1:]] == ["  check 11", "  check 25"]
    with pytest.raises(ChecksFailed):
        build_pack(github, kid=IO_KID, private_key=Ed25519PrivateKey.generate())


def test_pack_build_of_a_tool_pack_is_tool_build(
    echo_copy: Path, tmp_path: Path, fixed_key: Ed25519PrivateKey
) -> None:
    by_pack = build_pack(echo_copy, kid=KID, private_key=fixed_key, out_dir=tmp_path / "pack")
    by_tool = build_pack(echo_copy, kid=KID, private_key=fixed_key, out_dir=tmp_path / "tool", tool=True)
    assert by_pack.archive_path == tmp_path / "pack" / ".b3os-build" / "tool.tar"
    assert by_pack.manifest == by_tool.manifest and by_pack.archive == by_tool.archive
    assert tree(tmp_path / "pack") == tree(tmp_path / "tool")


def test_pack_build_cli_of_a_tool_pack_prints_what_tool_build_prints(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    b3os("keys", "generate", "--kid", KID, keys=keys)
    outs = {}
    for group in ("pack", "tool"):
        out = tmp_path / group
        res = b3os(group, "build", str(ECHO_DIR), "--kid", KID, "--out", str(out), keys=keys)
        assert res.returncode == 0, res.stderr
        outs[group] = res.stdout.replace(str(out), "OUT")
    assert outs["pack"] == outs["tool"]
    assert "archive: OUT/.b3os-build/tool.tar sha256:" in outs["pack"]
