"""Connection secrets sealed to the egress proxy's X25519 key: the api can seal, only the proxy can open.

    token   = "b3seal-v1." || base64url(ephemeral public key (32) || nonce (12) || ciphertext)
    key     = HKDF-SHA256(X25519(ephemeral, proxy), salt = ephemeral public || proxy public,
                          info = b"b3os-egress-seal-v1"), 32 bytes
    cipher  = ChaCha20-Poly1305(key, nonce, JSON plaintext, aad = binding)

The plaintext is `{"kind", "hosts", "inject", "secret"}`: the hosts and the way the secret is
injected travel sealed with it, so whoever holds a token (the api, its database) cannot send the
secret anywhere else. `binding` ties a token to one connection of one organization
(`connection_binding`): a token copied onto another row does not open.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from egress.errors import EgressError

PREFIX = "b3seal-v1."
_INFO = b"b3os-egress-seal-v1"
_RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


class SealError(EgressError):
    """A key or a sealed token cannot be used; the message says why (never a secret)."""

    def __init__(self, message: str) -> None:
        super().__init__("credential", message)


def connection_binding(org_id: str, connection_id: str) -> str:
    """The binding of one organization's connection: what a token is sealed to besides the key."""
    return f"b3os-connection\n{org_id}\n{connection_id}"


def generate_key() -> X25519PrivateKey:
    """A new proxy key pair."""
    return X25519PrivateKey.generate()


def public_key_b64(key: X25519PrivateKey) -> str:
    """The base64 (standard, padded) of the raw 32-byte public key."""
    return base64.b64encode(key.public_key().public_bytes(*_RAW)).decode()


def load_public_key(text: str) -> X25519PublicKey:
    """Parse a base64 raw X25519 public key.

    Raises:
        SealError: it is not the base64 of 32 bytes.
    """
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError, AttributeError):
        raise SealError("the egress public key is not base64") from None
    if len(raw) != 32:
        raise SealError(f"the egress public key has {len(raw)} bytes, not 32")
    return X25519PublicKey.from_public_bytes(raw)


def load_or_create_key(path: Path) -> X25519PrivateKey:
    """The proxy's private key from `path` (PKCS#8 PEM), made (mode 0600, directory 0700) when absent.

    Raises:
        SealError: the file exists but holds no X25519 private key.
    """
    if path.exists():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise SealError(f"{path} holds no usable private key ({type(exc).__name__})") from None
        if not isinstance(key, X25519PrivateKey):
            raise SealError(f"{path} holds a {type(key).__name__}, not an X25519 key")
        return key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = generate_key()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    return key


def _derive(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=_INFO).derive(shared)


def seal(public_key: str | X25519PublicKey, payload: dict[str, Any], *, binding: str) -> str:
    """Seal a JSON payload to the proxy's public key, bound to `binding`."""
    recipient = load_public_key(public_key) if isinstance(public_key, str) else public_key
    ephemeral = X25519PrivateKey.generate()
    eph_raw = ephemeral.public_key().public_bytes(*_RAW)
    key = _derive(ephemeral.exchange(recipient), eph_raw, recipient.public_bytes(*_RAW))
    nonce = os.urandom(12)
    plaintext = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    ciphertext = ChaCha20Poly1305(key).encrypt(nonce, plaintext, binding.encode())
    return PREFIX + base64.urlsafe_b64encode(eph_raw + nonce + ciphertext).decode().rstrip("=")


def open_sealed(private_key: X25519PrivateKey, token: str, *, binding: str) -> dict[str, Any]:
    """Open a token sealed to this key with this binding.

    Raises:
        SealError: not a token of this format, sealed to another key or binding, or tampered with.
    """
    if not isinstance(token, str) or not token.startswith(PREFIX):
        raise SealError("the sealed secret is not a b3seal-v1 token")
    body = token[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise SealError("the sealed secret is not base64url") from None
    if len(raw) < 32 + 12 + 16:
        raise SealError("the sealed secret is too short")
    eph_raw, nonce, ciphertext = raw[:32], raw[32:44], raw[44:]
    own = private_key.public_key().public_bytes(*_RAW)
    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(eph_raw))
        plaintext = ChaCha20Poly1305(_derive(shared, eph_raw, own)).decrypt(
            nonce, ciphertext, binding.encode()
        )
    except (InvalidTag, ValueError):
        raise SealError("the sealed secret does not open with this proxy's key and binding") from None
    payload = json.loads(plaintext)
    if not isinstance(payload, dict):
        raise SealError("the sealed secret holds no JSON object")
    return payload
