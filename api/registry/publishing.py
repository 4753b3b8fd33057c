"""Publishing a signed pack version, rule by rule; each refusal names its rule in one sentence.

The rules, in order (the `reason` of each refusal in brackets):

1. the manifest names a valid pack and version, else every publish check is reported [checks];
2. the pack's namespace is the caller's organization's in the publisher list [namespace];
3. the version is new: versions are immutable [version_exists];
4. the signature's kid is registered for the namespace [kid_unknown] and not revoked [kid_revoked];
5. every publish check passes, all violations listed [checks] (check 41, each fixture fits its action, is
   run by the route on the fixtures `read_fixtures` reads from their blobs);
6. every file was uploaded by the caller's organization [blob_missing] with the declared sha256
   and size [blob_mismatch]; the archive is the one tool.bundle.archive declares [archive];
7. the content hash matches [content_hash] and the signature verifies [signature].

The row is written under a lock (PostgreSQL advisory lock; SQLite's write lock) so `seq` grows in
commit order; the unique (pack, version) makes exactly one of concurrent publishes win.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api.db import is_postgres
from api.errors import Conflict, Forbidden, InvalidRequest
from api.models import BlobUpload, Pack, PackVersion, PublishedBlob, Publisher, SigningKey
from api.registry.blobs import BlobStore, stored_sha256
from packs.errors import HashMismatchError, SignatureError, Violation
from packs.fixtures import fixture_paths, size_problems
from packs.hashing import BundleFile
from packs.names import PACK_ID_RE, is_semver
from packs.semver import parse_version
from packs.signing import check_archive_file, verify_manifest

_PUBLISH_LOCK = 0x6233_7075  # "b3pu"


def _checks_failed(violations: Sequence[Violation]) -> InvalidRequest:
    n = len(violations)
    listed = "; ".join(v.message for v in violations)
    return InvalidRequest(
        f"The manifest fails {n} publish check{'s' if n != 1 else ''}: {listed}",
        reason="checks",
        violations=[{"check": v.check, "field": v.field, "message": v.message} for v in violations],
    )


def _check_files(session: Session, blobs: BlobStore, *, org_id: str, files: Sequence[BundleFile]) -> None:
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise InvalidRequest(f"The file {f.path} is listed twice.", field="files", reason="files")
        seen.add(f.path)
        name = f"sha256:{f.sha256}"
        size = blobs.size(f.sha256)
        if size is None or session.get(BlobUpload, (f.sha256, org_id)) is None:
            raise InvalidRequest(
                f"The file {f.path} ({name}) was not uploaded: "
                f"PUT it to /v1/actions/registry/blobs/{name} first.",
                field="files",
                reason="blob_missing",
                path=f.path,
            )
        if size != f.bytes:
            raise InvalidRequest(
                f"The file {f.path} is declared with {f.bytes} bytes but its blob {name} has {size}.",
                field="files",
                reason="blob_mismatch",
                path=f.path,
            )
        if stored_sha256(blobs, f.sha256) != f.sha256:
            raise InvalidRequest(
                f"The stored blob {name} of the file {f.path} no longer matches its sha256: upload it again.",
                field="files",
                reason="blob_mismatch",
                path=f.path,
            )


def _signing_key(session: Session, *, namespace: str, manifest: dict[str, Any]) -> SigningKey:
    sig = manifest.get("signature")
    kid = sig.get("kid") if isinstance(sig, dict) else None
    if not isinstance(kid, str):
        raise InvalidRequest(
            "The manifest is not signed: it has no signature.kid (build it with b3os tool build --kid).",
            field="manifest.signature",
            reason="signature",
        )
    key = session.get(SigningKey, kid)
    if key is None or key.namespace != namespace:
        raise Forbidden(
            f"The kid {kid[:300]} is not registered for the namespace {namespace}: "
            f"register its public key with POST /v1/actions/publishers/{namespace}/keys.",
            field="manifest.signature.kid",
            reason="kid_unknown",
        )
    if key.revoked_at is not None:
        raise Forbidden(
            f"The kid {kid} was revoked on {key.revoked_at:%Y-%m-%d}: sign with a registered key.",
            field="manifest.signature.kid",
            reason="kid_revoked",
        )
    return key


def read_fixtures(
    session: Session, blobs: BlobStore, *, org_id: str, files: Sequence[BundleFile]
) -> tuple[list[Violation], dict[str, bytes]]:
    """The fixtures of a publish (fixtures/**/*.json), for check 41 in a checker process: the violations of
    their declared sizes (`packs.fixtures.size_problems`), else the bytes of each one the organization
    uploaded with its declared size (any other is refused by rule 6 afterwards, unread)."""
    by_path = {f.path: f for f in files}
    paths = fixture_paths(by_path)
    refused = size_problems({p: by_path[p].bytes for p in paths})
    if refused:
        return refused, {}
    contents: dict[str, bytes] = {}
    for path in paths:
        f = by_path[path]
        if blobs.size(f.sha256) == f.bytes and session.get(BlobUpload, (f.sha256, org_id)) is not None:
            contents[path] = b"".join(blobs.chunks(f.sha256))
    return [], contents


def _version_exists(pack: str, version: str) -> Conflict:
    return Conflict(
        f"The version {version} of {pack} is already published: "
        "versions are immutable, publish a new version.",
        reason="version_exists",
    )


def publish(
    session: Session,
    *,
    blobs: BlobStore,
    org_id: str,
    key_id: str,
    manifest: dict[str, Any],
    violations: Sequence[Violation],
    files: Sequence[BundleFile],
) -> PackVersion:
    """Check every rule and record the version (commits); raises the first rule's refusal.

    `violations` are the manifest's publish checks' (`packs.checks.run_checks`, which the api runs in a
    checker process: `api.checker`).
    """
    pack, version = manifest.get("pack"), manifest.get("version")
    if not (isinstance(pack, str) and PACK_ID_RE.match(pack) and is_semver(version)):
        raise _checks_failed(violations)
    assert isinstance(version, str)
    namespace = pack.partition("/")[0]
    publisher = session.get(Publisher, namespace)
    if publisher is None or publisher.org_id != org_id:
        raise Forbidden(
            f"The namespace {namespace} is not your organization's in the publisher list.",
            field="manifest.pack",
            reason="namespace",
        )
    taken = select(PackVersion.id).where(PackVersion.pack == pack, PackVersion.version == version)
    if session.exec(taken).first() is not None:
        raise _version_exists(pack, version)
    key = _signing_key(session, namespace=namespace, manifest=manifest)
    if violations:
        raise _checks_failed(violations)
    _check_files(session, blobs, org_id=org_id, files=files)
    try:
        check_archive_file(manifest, files)
    except HashMismatchError as exc:
        raise InvalidRequest(
            f"The archive does not match the manifest: {exc}.", field="files", reason="archive"
        ) from exc
    try:
        content_hash = verify_manifest(manifest, files, key.public_key)
    except HashMismatchError as exc:
        raise InvalidRequest(
            f"The content hash does not match: {exc}.", field="manifest.signature.hash", reason="content_hash"
        ) from exc
    except SignatureError as exc:
        raise InvalidRequest(
            f"The signature does not verify: {exc}.", field="manifest.signature", reason="signature"
        ) from exc
    return _record(
        session,
        org_id=org_id,
        key_id=key_id,
        namespace=namespace,
        manifest=manifest,
        files=files,
        content_hash=content_hash,
        kid=key.kid,
    )


def _record(
    session: Session,
    *,
    org_id: str,
    key_id: str,
    namespace: str,
    manifest: dict[str, Any],
    files: Sequence[BundleFile],
    content_hash: str,
    kid: str,
) -> PackVersion:
    pack, version = str(manifest["pack"]), str(manifest["version"])
    major, minor, patch = parse_version(version)
    session.rollback()  # start the writing transaction afresh, and take the lock first in it
    try:
        if is_postgres(session.get_bind().engine):  # type: ignore[union-attr]
            session.exec(text("SELECT pg_advisory_xact_lock(:id)").bindparams(id=_PUBLISH_LOCK))  # type: ignore[call-overload]
        taken = select(PackVersion.id).where(PackVersion.pack == pack, PackVersion.version == version)
        if session.exec(taken).first() is not None:
            raise _version_exists(pack, version)
        if session.get(Pack, pack) is None:
            session.add(Pack(id=pack, namespace=namespace))
            session.flush()
        seq = (session.exec(select(func.max(PackVersion.seq))).one() or 0) + 1
        row = PackVersion(
            pack=pack,
            version=version,
            major=major,
            minor=minor,
            patch=patch,
            manifest=manifest,
            files=[f.to_dict() for f in files],
            content_hash=content_hash,
            kid=kid,
            seq=seq,
            org_id=org_id,
            published_by=key_id,
        )
        session.add(row)
        held = select(PublishedBlob.sha256).where(col(PublishedBlob.sha256).in_([f.sha256 for f in files]))
        known = set(session.exec(held))
        session.add_all(PublishedBlob(sha256=d) for d in sorted({f.sha256 for f in files} - known))
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise _version_exists(pack, version) from exc
    return row
