"""Content hash: golden vectors, the RFC 8785 serialization it rests on, and what it covers."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from packfixtures import HERE

from packs.errors import ManifestError
from packs.hashing import CONTENT_DOMAIN, BundleFile, canonical_json, content_document, content_hash
from packs.signing import public_key_b64, sign_manifest, signed_message, verify_manifest

GOLDEN = HERE / "golden"


def golden() -> tuple[dict[str, Any], list[BundleFile], dict[str, Any]]:
    manifest = json.loads((GOLDEN / "manifest.json").read_text(encoding="utf-8"))
    files = [
        BundleFile.of(p.relative_to(GOLDEN / "files").as_posix(), p.read_bytes())
        for p in sorted((GOLDEN / "files").rglob("*"))
        if p.is_file()
    ]
    expected = json.loads((GOLDEN / "expected.json").read_text())
    return manifest, files, expected


def test_golden_vector_hash_preimage_and_signature() -> None:
    manifest, files, expected = golden()
    assert [f.to_dict() for f in sorted(files, key=lambda f: f.path)] == expected["files"]
    preimage = (GOLDEN / "preimage.bin").read_bytes()
    assert CONTENT_DOMAIN + canonical_json(content_document(manifest, files)) == preimage
    assert content_hash(manifest, files) == expected["hash"]
    assert "sha256:" + hashlib.sha256(preimage).hexdigest() == expected["hash"]

    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(expected["seed_hex"]))
    assert public_key_b64(key) == expected["public_key"]
    signed = sign_manifest(manifest, files, key, expected["kid"])
    assert signed["signature"] == {
        "kid": expected["kid"],
        "alg": "ed25519",
        "hash": expected["hash"],
        "value": expected["signature"],
    }
    message = signed_message(manifest["pack"], manifest["version"], expected["hash"])
    assert message == expected["message"].encode()
    # Checked with the bare primitive too, as another implementation would.
    Ed25519PublicKey.from_public_bytes(base64.b64decode(expected["public_key"])).verify(
        base64.b64decode(expected["signature"]), message
    )
    assert verify_manifest(signed, files, expected["public_key"]) == expected["hash"]


def test_golden_preimage_is_the_documented_document() -> None:
    manifest, files, _ = golden()
    preimage = (GOLDEN / "preimage.bin").read_bytes()
    assert preimage.startswith(b"b3pack-content-v1\n")
    doc = json.loads(preimage[len(b"b3pack-content-v1\n") :])
    assert doc == {"files": [f.to_dict() for f in sorted(files, key=lambda f: f.path)], "manifest": manifest}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (1.0, b"1"),
        (-0.0, b"0"),
        (0.1, b"0.1"),
        (1e-7, b"1e-7"),
        (123456789012345.6, b"123456789012345.6"),
        (2**53 - 1, b"9007199254740991"),
        ('\u20ac$\u000f\nA\'B"\\\\"/', b'"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"'),
        ("\u00e9", '"\u00e9"'.encode()),
        (True, b"true"),
        (None, b"null"),
        ([], b"[]"),
    ],
)
def test_rfc8785_serializes_numbers_and_strings_canonically(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


def test_rfc8785_orders_keys_by_utf16_code_units() -> None:
    # U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FB33 although its code point is larger.
    value = {"\ufb33": 3, "\U0001f600": 2, "\u20ac": 1, "b": 0, "a": {"z": 1, "B": 2}, "\r": 4, "1": 5}
    assert canonical_json(value) == (
        '{"\\r":4,"1":5,"a":{"B":2,"z":1},"b":0,"\u20ac":1,"\U0001f600":2,"\ufb33":3}'.encode()
    )


def test_rfc8785_refuses_what_it_cannot_represent() -> None:
    with pytest.raises(ManifestError, match="RFC 8785"):
        canonical_json({"n": float("nan")})
    with pytest.raises(ManifestError, match="RFC 8785"):
        canonical_json({"n": 2**53 + 1})


def test_the_hash_ignores_the_signature_and_file_order_but_nothing_else() -> None:
    manifest, files, expected = golden()
    assert content_hash({**manifest, "signature": {"kid": "x"}}, list(reversed(files))) == expected["hash"]
    assert content_hash({**manifest, "version": "1.0.1"}, files) != expected["hash"]
    changed = [files[0], files[1], BundleFile(files[2].path, files[2].sha256, files[2].bytes + 1)]
    assert content_hash(manifest, changed) != expected["hash"]
    assert content_hash(manifest, files[:2]) != expected["hash"]


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("../x", "bundle file path '../x' is not accepted"),
        ("/etc/passwd", "bundle file path '/etc/passwd' is not accepted"),
        ("fixtures//a.json", "bundle file path 'fixtures//a.json' is not accepted"),
        ("fixtures/.hidden", "bundle file path 'fixtures/.hidden' is not accepted"),
    ],
)
def test_a_bad_bundle_path_is_refused(path: str, words: str) -> None:
    manifest, _, _ = golden()
    with pytest.raises(ManifestError) as err:
        content_hash(manifest, [BundleFile.of(path, b"x")])
    assert str(err.value).startswith(words)


def test_a_file_listed_twice_or_with_a_bad_digest_is_refused() -> None:
    manifest, _, _ = golden()
    with pytest.raises(ManifestError, match="bundle file 'NOTICES.md' is listed twice"):
        content_hash(manifest, [BundleFile.of("NOTICES.md", b"a"), BundleFile.of("NOTICES.md", b"b")])
    with pytest.raises(ManifestError, match="sha256 'ABC' is not 64 lowercase hex digits"):
        content_hash(manifest, [BundleFile("NOTICES.md", "ABC", 1)])


def test_bundle_file_records_read_from_a_publish_body() -> None:
    record = {"path": "tool.tar", "sha256": "0" * 64, "bytes": 3}
    assert BundleFile.from_dict(record).to_dict() == record
    with pytest.raises(ManifestError, match="is not accepted"):
        BundleFile.from_dict({"path": "tool.tar"})


def test_golden_files_are_as_checked_in(tmp_path: Path) -> None:
    # The vector's file bytes must not be touched by editors or git attributes.
    assert (GOLDEN / "files" / "tool.tar").read_bytes() == b"a stand-in for the archive bytes\n"
