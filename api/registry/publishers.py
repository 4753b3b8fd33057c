"""The publisher list (namespace -> organization) and each namespace's Ed25519 signing keys.

A kid reads `<namespace>#<name>` (`com.example.tools#dev-2026-10`). Revoking a kid stops new
publishes signed with it; versions already published stay. CRUD functions take keyword-only
arguments and do not commit.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlmodel import Session, select

from api.errors import Conflict, InvalidRequest, NotFound
from api.models import Organization, Publisher, SigningKey, utcnow
from packs.names import NAMESPACE_HINT, is_namespace, split_kid


def check_namespace(namespace: str) -> str:
    """The namespace, or InvalidRequest when it is not reverse-DNS such as com.example.tools."""
    if len(namespace) > 200 or not is_namespace(namespace):
        raise InvalidRequest(f"The namespace {namespace[:200]!r} is not {NAMESPACE_HINT}.", field="namespace")
    return namespace


def set_publisher(session: Session, *, namespace: str, org_id: str) -> Publisher:
    """Give a namespace to an organization (or move it)."""
    check_namespace(namespace)
    if session.get(Organization, org_id) is None:
        raise NotFound(f"There is no organization {org_id}.", field="org_id")
    publisher = session.get(Publisher, namespace)
    if publisher is None:
        publisher = Publisher(namespace=namespace, org_id=org_id)
    publisher.org_id = org_id
    session.add(publisher)
    session.flush()
    return publisher


def own_publisher(session: Session, *, namespace: str, org_id: str) -> Publisher:
    """The caller's publisher of that namespace; NotFound for another organization's or none."""
    publisher = session.get(Publisher, namespace)
    if publisher is None or publisher.org_id != org_id:
        raise NotFound(f"Your organization has no publisher namespace {namespace[:200]}.", field="namespace")
    return publisher


def decode_public_key(public_key: str) -> bytes:
    """The 32 raw bytes of a base64 Ed25519 public key, or InvalidRequest."""
    try:
        raw = base64.b64decode(public_key, validate=True)
        Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(
            "The field public_key is not the standard base64 of a raw 32-byte Ed25519 public key.",
            field="public_key",
        ) from exc
    return raw


def register_signing_key(session: Session, *, namespace: str, kid: str, public_key: str) -> SigningKey:
    """Register a namespace's public key under a kid (the same key again is a no-op)."""
    try:
        ns, _ = split_kid(kid)
    except ValueError as exc:
        raise InvalidRequest(f"The {exc}.", field="kid") from exc
    if ns != namespace:
        raise InvalidRequest(f"The kid {kid[:300]!r} is not of the namespace {namespace}.", field="kid")
    decode_public_key(public_key)
    existing = session.get(SigningKey, kid)
    if existing is not None:
        if (
            existing.public_key == public_key
            and existing.revoked_at is None
            and existing.namespace == namespace
        ):
            return existing
        raise Conflict(f"The kid {kid} is already registered; a kid names one key forever.", field="kid")
    other = session.exec(select(SigningKey).where(SigningKey.public_key == public_key)).first()
    if other is not None:  # one key, one kid: revoking a kid then revokes its key everywhere
        raise Conflict(
            f"This public key is already registered as {other.kid}; a key has one kid: generate a new "
            "key pair for a new kid.",
            field="public_key",
        )
    key = SigningKey(kid=kid, namespace=namespace, public_key=public_key)
    session.add(key)
    session.flush()
    return key


def list_signing_keys(session: Session, *, namespace: str) -> list[SigningKey]:
    """A namespace's signing keys, oldest first."""
    stmt = select(SigningKey).where(SigningKey.namespace == namespace).order_by(SigningKey.created_at)  # type: ignore[arg-type]
    return list(session.exec(stmt).all())


def revoke_signing_key(session: Session, *, namespace: str, kid: str) -> SigningKey:
    """Revoke a kid of the namespace: no new publish may be signed with it."""
    key = session.get(SigningKey, kid)
    if key is None or key.namespace != namespace:
        raise NotFound(f"The namespace {namespace} has no signing key {kid[:300]}.", field="kid")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.add(key)
        session.flush()
    return key
