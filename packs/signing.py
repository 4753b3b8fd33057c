"""Ed25519 signatures of pack versions, and the local key store.

The signed message (docs/packs.md, "Signature") is the UTF-8 of::

    "b3pack-sig-v1\\n" + pack + "\\n" + version + "\\n" + hash

with no trailing newline, e.g. "b3pack-sig-v1\\ncom.example.tools/echo\\n1.0.0\\nsha256:<hex>". The manifest
carries {"kid": "<namespace>#<name>", "alg": "ed25519", "hash": "sha256:<hex>",
"value": <base64 of 64 bytes>}.

Keys live in $B3OS_KEYS_DIR (default ~/.b3os/keys): "<kid>.key" (PKCS#8 PEM, mode 0600) and
"<kid>.pub" (base64 of the raw 32-byte public key).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from packs.errors import HashMismatchError, KeyStoreError, SignatureError
from packs.hashing import ARCHIVE_PATHS, BundleFile, content_hash
from packs.names import split_kid

SIG_DOMAIN = "b3pack-sig-v1"
ALG = "ed25519"
_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def signed_message(pack: str, version: str, hash_: str) -> bytes:
    """The exact bytes an Ed25519 pack signature covers."""
    return f"{SIG_DOMAIN}\n{pack}\n{version}\n{hash_}".encode()


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """Base64 (standard, padded) of the raw 32-byte public key."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def load_public_key(public_key_b64_: str) -> Ed25519PublicKey:
    """Read a base64 raw 32-byte Ed25519 public key.

    Raises:
        SignatureError: when the text is not base64 of 32 bytes.
    """
    try:
        raw = base64.b64decode(public_key_b64_.strip(), validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError, AttributeError) as exc:
        raise SignatureError(
            f"public key {public_key_b64_!r} is not base64 of a raw 32-byte Ed25519 key"
        ) from exc


def sign_manifest(
    manifest: Mapping[str, Any], files: Sequence[BundleFile], private_key: Ed25519PrivateKey, kid: str
) -> dict[str, Any]:
    """Return a copy of `manifest` with its "signature" block (any old one replaced).

    Raises:
        SignatureError: when the kid is malformed or its namespace is not the pack's.
        ManifestError: when the manifest cannot be hashed.
    """
    _check_kid(kid, manifest.get("pack"))
    hash_ = content_hash(manifest, files)
    value = private_key.sign(signed_message(str(manifest["pack"]), str(manifest["version"]), hash_))
    signed = {k: v for k, v in manifest.items() if k != "signature"}
    signed["signature"] = {"kid": kid, "alg": ALG, "hash": hash_, "value": base64.b64encode(value).decode()}
    return signed


def verify_manifest(manifest: Mapping[str, Any], files: Sequence[BundleFile], public_key_b64_: str) -> str:
    """Recompute the content hash and check the signature; return the hash.

    Also checks that the archive among `files` is the one `tool.bundle.archive` declares.

    Raises:
        SignatureError: no or a malformed signature block, a kid outside the pack's namespace, or a
            signature that does not verify with the public key.
        HashMismatchError: the archive or the content hash differs from what the manifest signed.
    """
    sig = manifest.get("signature")
    if not isinstance(sig, Mapping):
        raise SignatureError(
            "signature is missing: the manifest is not signed (build it with `b3os tool build`)"
        )
    kid, alg, hash_, value = sig.get("kid"), sig.get("alg"), sig.get("hash"), sig.get("value")
    _check_kid(kid, manifest.get("pack"))
    if alg != ALG:
        raise SignatureError(f'signature.alg {alg!r} is not accepted: use "ed25519"')
    if not isinstance(hash_, str) or _HASH_RE.match(hash_) is None:
        raise SignatureError(f'signature.hash {hash_!r} is not accepted: use "sha256:<64 lowercase hex>"')
    try:
        raw_sig = base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignatureError(f"signature.value {value!r} is not base64") from exc
    if len(raw_sig) != 64:
        raise SignatureError(f"signature.value holds {len(raw_sig)} bytes: an Ed25519 signature has 64")
    check_archive_file(manifest, files)
    actual = content_hash(manifest, files)
    if actual != hash_:
        raise HashMismatchError(
            f"content hash {actual} does not match signature.hash {hash_}: the manifest or a bundle file "
            f"({', '.join(sorted(f.path for f in files)) or 'none'}) changed after signing"
        )
    try:
        load_public_key(public_key_b64_).verify(
            raw_sig, signed_message(str(manifest["pack"]), str(manifest["version"]), hash_)
        )
    except InvalidSignature as exc:
        raise SignatureError(
            f"signature.value does not verify with the public key {public_key_b64_.strip()} of {kid}: "
            "the signature, the pack, the version or the hash was changed, or another key signed it"
        ) from exc
    return hash_


def check_archive_file(manifest: Mapping[str, Any], files: Sequence[BundleFile]) -> None:
    """Check that the bundle's archive file is the one tool.bundle.archive declares (tool packs only).

    Raises:
        HashMismatchError: the archive is absent, or its sha256 or size differs from the declared one.
    """
    tool = manifest.get("tool")
    if not isinstance(tool, Mapping):
        return
    archive = (tool.get("bundle") or {}).get("archive") if isinstance(tool.get("bundle"), Mapping) else None
    if not isinstance(archive, Mapping):
        return
    path = ARCHIVE_PATHS.get(str(archive.get("format")), "tool.tar")
    found = [f for f in files if f.path == path]
    if not found:
        raise HashMismatchError(f"the bundle has no {path}, the archive tool.bundle.archive declares")
    f = found[0]
    if f.sha256 != archive.get("sha256"):
        raise HashMismatchError(
            f"{path} has sha256 {f.sha256} but tool.bundle.archive.sha256 is {archive.get('sha256')!r}"
        )
    if f.bytes != archive.get("bytes"):
        raise HashMismatchError(
            f"{path} has {f.bytes} bytes but tool.bundle.archive.bytes is {archive.get('bytes')!r}"
        )


def _check_kid(kid: object, pack: object) -> None:
    try:
        namespace, _ = split_kid(kid)  # type: ignore[arg-type]
    except ValueError as exc:
        raise SignatureError(f"signature.kid: {exc}") from exc
    pack_ns = str(pack).partition("/")[0]
    if namespace != pack_ns:
        raise SignatureError(
            f"signature.kid {kid!r} is not accepted for pack {pack!r}: "
            f"use a key id of the namespace {pack_ns!r}"
        )


# The key store ---------------------------------------------------------------------------------------


def keys_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The key directory: `override`, else $B3OS_KEYS_DIR, else ~/.b3os/keys."""
    if override:
        return Path(override)
    env = os.environ.get("B3OS_KEYS_DIR")
    return Path(env) if env else Path.home() / ".b3os" / "keys"


def _key_paths(kid: str, directory: Path) -> tuple[Path, Path]:
    try:
        split_kid(kid)
    except ValueError as exc:
        raise KeyStoreError(str(exc)) from exc
    return directory / f"{kid}.key", directory / f"{kid}.pub"


def generate_key(kid: str, directory: Path | None = None) -> str:
    """Create a key pair for `kid` in the key directory and return its public key (base64 raw 32 bytes).

    The private key file is created with mode 0600 (the directory 0700) and never overwritten.

    Raises:
        KeyStoreError: a malformed kid, or a key of that kid already exists.
    """
    directory = directory or keys_dir()
    private_path, public_path = _key_paths(kid, directory)
    if private_path.exists() or public_path.exists():
        raise KeyStoreError(f"key {kid} already exists in {directory}: choose another key id")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.chmod(private_path, 0o600)  # the umask may have narrowed it further; never widened
    public = public_key_b64(key)
    public_path.write_text(public + "\n")
    return public


def load_private_key(kid: str, directory: Path | None = None) -> Ed25519PrivateKey:
    """Read the private key of `kid` from the key directory.

    Raises:
        KeyStoreError: the key is absent or is not an Ed25519 private key.
    """
    directory = directory or keys_dir()
    private_path, _ = _key_paths(kid, directory)
    if not private_path.is_file():
        raise KeyStoreError(
            f"no private key for {kid} in {directory}: create one with `b3os keys generate --kid {kid}`"
        )
    try:
        key = serialization.load_pem_private_key(private_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise KeyStoreError(f"{private_path} is not a PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyStoreError(f"{private_path} is not an Ed25519 private key")
    return key


def load_public_key_b64(kid: str, directory: Path | None = None) -> str:
    """Read the public key (base64 raw 32 bytes) of `kid` from the key directory.

    Raises:
        KeyStoreError: the key is absent or malformed.
    """
    directory = directory or keys_dir()
    private_path, public_path = _key_paths(kid, directory)
    if public_path.is_file():
        text = public_path.read_text().strip()
        try:
            load_public_key(text)
        except SignatureError as exc:
            raise KeyStoreError(f"{public_path}: {exc}") from exc
        return text
    if private_path.is_file():
        return public_key_b64(load_private_key(kid, directory))
    raise KeyStoreError(
        f"no public key for {kid} in {directory}: pass it with --public-key or generate the key"
    )
