"""Build, sign and verify the echo tool; a changed tool file, manifest or signature is found."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packfixtures import ECHO_DIR, KID

from packs.build import build_pack
from packs.errors import ChecksFailed, HashMismatchError, KeyStoreError, SignatureError
from packs.loader import load_built_bundle, load_pack
from packs.signing import generate_key, load_public_key_b64, public_key_b64, verify_manifest
from packs.verify import verify_pack_dir


@pytest.fixture
def built(echo_copy: Path, keys_dir: Path, tmp_path: Path) -> Path:
    generate_key(KID, keys_dir)
    out = tmp_path / "built"
    build_pack(echo_copy, kid=KID, out_dir=out, tool=True)
    return out


def test_build_fills_the_archive_signs_and_verifies(built: Path, keys_dir: Path) -> None:
    manifest = json.loads((built / "b3pack.json").read_text())
    archive = manifest["tool"]["bundle"]["archive"]
    data = (built / ".b3os-build" / "tool.tar").read_bytes()
    assert archive["bytes"] == len(data) == 10240
    assert archive["entries"] == 2
    assert archive["unpackedBytes"] == (ECHO_DIR / "tool" / "bin" / "echo-tool").stat().st_size
    assert manifest["signature"]["kid"] == KID
    report = verify_pack_dir(built)
    assert report.problems == []
    assert report.hash == manifest["signature"]["hash"]
    m, files = load_built_bundle(built)
    assert sorted(files) == [
        "NOTICES.md",
        "fixtures/echo-file.json",
        "fixtures/echo-text.json",
        "fixtures/fail-tool-error.json",
        "fixtures/noop.json",
        "tool.tar",
    ]
    from packs.loader import bundle_files

    assert verify_manifest(m, bundle_files(files), load_public_key_b64(KID, keys_dir)) == report.hash


def test_build_with_out_leaves_the_source_untouched(echo_copy: Path, built: Path) -> None:
    assert (echo_copy / "b3pack.json").read_bytes() == (ECHO_DIR / "b3pack.json").read_bytes()
    assert not (echo_copy / ".b3os-build").exists()


def test_build_in_place_writes_the_signed_manifest_and_the_archive(echo_copy: Path, keys_dir: Path) -> None:
    generate_key(KID, keys_dir)
    result = build_pack(echo_copy, kid=KID, tool=True)
    assert result.archive_path == echo_copy / ".b3os-build" / "tool.tar"
    assert json.loads((echo_copy / "b3pack.json").read_text())["signature"]["hash"] == result.hash
    assert verify_pack_dir(echo_copy).problems == []
    # Building again gives the same archive and the same hash.
    assert build_pack(echo_copy, kid=KID, tool=True).hash == result.hash


def test_two_builds_from_copies_differing_in_mtimes_owners_and_umask_agree(
    tmp_path: Path, fixed_key: Ed25519PrivateKey
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(ECHO_DIR, a, ignore=shutil.ignore_patterns(".b3os-build"))
    old = os.umask(0o077)
    try:
        shutil.copytree(ECHO_DIR, b, ignore=shutil.ignore_patterns(".b3os-build"), copy_function=shutil.copy)
    finally:
        os.umask(old)
    for dirpath, dirnames, filenames in os.walk(b):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            os.chown(p, 1001, 1001)
            os.utime(p, (1_700_000_000, 1_700_000_000))
    ra = build_pack(a, kid=KID, private_key=fixed_key, out_dir=tmp_path / "oa", tool=True)
    rb = build_pack(b, kid=KID, private_key=fixed_key, out_dir=tmp_path / "ob", tool=True)
    assert ra.archive == rb.archive
    assert ra.hash == rb.hash
    assert ra.manifest["signature"] == rb.manifest["signature"]


def test_changing_one_byte_of_a_tool_file_fails_verify(built: Path) -> None:
    script = built / "tool" / "bin" / "echo-tool"
    data = bytearray(script.read_bytes())
    data[-2] ^= 1
    script.write_bytes(bytes(data))
    problems = verify_pack_dir(built).problems
    assert problems[0].startswith(
        f"{built / '.b3os-build' / 'tool.tar'} differs from the archive built from tool/"
    )
    assert any(
        p.startswith("tool.bundle.archive.sha256 is '") and "a file under tool/ changed" in p
        for p in problems
    )


def test_changing_one_byte_of_the_manifest_fails_verify(built: Path) -> None:
    path = built / "b3pack.json"
    path.write_text(path.read_text().replace('"title": "Echo"', '"title": "Echp"'))
    problems = verify_pack_dir(built).problems
    assert len(problems) == 1
    assert problems[0].startswith("content hash sha256:")
    assert "does not match signature.hash sha256:" in problems[0]
    assert "the manifest or a bundle file (NOTICES.md, fixtures/echo-file.json" in problems[0]


def test_changing_a_bundle_file_fails_verify(built: Path) -> None:
    (built / "NOTICES.md").write_text("other notices\n")
    [problem] = verify_pack_dir(built).problems
    assert "does not match signature.hash" in problem


def test_changing_one_byte_of_the_signature_fails_verify(built: Path) -> None:
    path = built / "b3pack.json"
    manifest = json.loads(path.read_text())
    raw = bytearray(base64.b64decode(manifest["signature"]["value"]))
    raw[0] ^= 1
    manifest["signature"]["value"] = base64.b64encode(bytes(raw)).decode()
    path.write_text(json.dumps(manifest))
    [problem] = verify_pack_dir(built).problems
    assert problem.startswith("signature.value does not verify with the public key ")
    assert f"of {KID}: the signature, the pack, the version or the hash was changed" in problem


def test_another_key_fails_verify(built: Path) -> None:
    other = public_key_b64(Ed25519PrivateKey.generate())
    [problem] = verify_pack_dir(built, public_key_b64=other).problems
    assert problem.startswith(f"signature.value does not verify with the public key {other} of {KID}")


def test_verify_manifest_raises_precise_errors(built: Path, keys_dir: Path) -> None:
    m, files = load_built_bundle(built)
    from packs.loader import bundle_files

    key = load_public_key_b64(KID, keys_dir)
    records = bundle_files(files)
    with pytest.raises(SignatureError, match="^signature is missing"):
        verify_manifest({k: v for k, v in m.items() if k != "signature"}, records, key)
    with pytest.raises(HashMismatchError, match="^the bundle has no tool.tar"):
        verify_manifest(m, [r for r in records if r.path != "tool.tar"], key)
    bad = bundle_files({**files, "tool.tar": files["tool.tar"] + b"\0"})
    with pytest.raises(
        HashMismatchError, match=r"^tool.tar has sha256 [0-9a-f]{64} but tool.bundle.archive.sha256 is"
    ):
        verify_manifest(m, bad, key)
    with pytest.raises(SignatureError, match="^signature.kid 'com.other#k' is not accepted for pack"):
        verify_manifest({**m, "signature": {**m["signature"], "kid": "com.other#k"}}, records, key)


def test_build_refuses_with_every_violation(echo_copy: Path, keys_dir: Path) -> None:
    generate_key(KID, keys_dir)
    path = echo_copy / "b3pack.json"
    m = json.loads(path.read_text())
    m["tool"]["size"] = {"vcpu": 2, "memoryMb": 512}
    m["tool"]["image"] = "ubuntu"
    path.write_text(json.dumps(m))
    with pytest.raises(ChecksFailed) as err:
        build_pack(echo_copy, kid=KID, tool=True)
    assert [v.check for v in err.value.violations] == [14, 16]
    assert not (echo_copy / ".b3os-build").exists()


def test_build_needs_a_key_of_the_pack_namespace(echo_copy: Path, keys_dir: Path) -> None:
    with pytest.raises(KeyStoreError, match=f"^no private key for {KID} in {keys_dir}"):
        build_pack(echo_copy, kid=KID, tool=True)
    with pytest.raises(SignatureError, match="^key id 'com.other#k' is not of the pack's namespace"):
        build_pack(echo_copy, kid="com.other#k", tool=True)


def test_the_loader_names_what_is_missing(echo_copy: Path) -> None:
    from packs.errors import ManifestError

    (echo_copy / "NOTICES.md").unlink()
    with pytest.raises(ManifestError, match="NOTICES.md is missing: tool.notices names 'NOTICES.md'"):
        load_pack(echo_copy)
    (echo_copy / "b3pack.json").write_text('{"pack": ')
    with pytest.raises(ManifestError, match="is not valid JSON: Expecting value at line 1, column 10"):
        load_pack(echo_copy)


def test_key_store_files_and_modes(keys_dir: Path) -> None:
    public = generate_key(KID, keys_dir)
    assert len(base64.b64decode(public)) == 32
    assert (keys_dir / f"{KID}.key").stat().st_mode & 0o777 == 0o600
    assert keys_dir.stat().st_mode & 0o777 == 0o700
    assert (keys_dir / f"{KID}.pub").read_text() == public + "\n"
    with pytest.raises(KeyStoreError, match=f"^key {KID} already exists"):
        generate_key(KID, keys_dir)
    with pytest.raises(KeyStoreError, match="^key id 'nonamespace#x' is not accepted"):
        generate_key("nonamespace#x", keys_dir)


def test_a_tar_gz_pack_builds_and_verifies(echo_copy: Path, keys_dir: Path, tmp_path: Path) -> None:
    generate_key(KID, keys_dir)
    path = echo_copy / "b3pack.json"
    m = json.loads(path.read_text())
    m["tool"]["bundle"]["archive"]["format"] = "tar.gz"
    path.write_text(json.dumps(m))
    result = build_pack(echo_copy, kid=KID, out_dir=tmp_path / "gz", tool=True)
    assert result.archive_path.name == "tool.tar.gz"
    assert result.archive[:2] == b"\x1f\x8b"
    assert [f.path for f in result.files if f.path.startswith("tool")] == ["tool.tar.gz"]
    assert verify_pack_dir(tmp_path / "gz").problems == []


def test_a_fixture_with_a_refused_name_is_named(echo_copy: Path) -> None:
    from packs.errors import ManifestError

    (echo_copy / "fixtures" / "bad name.json").write_text("{}")
    with pytest.raises(
        ManifestError, match="^fixture bundle file path 'fixtures/bad name.json' is not accepted"
    ):
        load_pack(echo_copy)


def test_out_refuses_a_directory_holding_other_files(echo_copy: Path, keys_dir: Path, tmp_path: Path) -> None:
    from packs.errors import BuildError

    generate_key(KID, keys_dir)
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(BuildError, match="is not empty and holds no earlier build"):
        build_pack(echo_copy, kid=KID, out_dir=other, tool=True)
    assert (other / "mine.txt").read_text() == "keep"
    build_pack(echo_copy, kid=KID, out_dir=tmp_path / "again", tool=True)
    build_pack(echo_copy, kid=KID, out_dir=tmp_path / "again", tool=True)  # an earlier build is replaced
