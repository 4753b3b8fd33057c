"""Content-addressed blobs, in one of two stores chosen by `B3OS_BLOB_STORE`.

- `filesystem` (the default): `<blob_dir>/sha256/<ab>/<hex>` on the api's disk. One api, or apis that
  share that directory.
- `database`: the `blobs` table of the api's database (bytea on PostgreSQL, BLOB on SQLite), so apis
  with separate disks serve one registry. For blobs of at most 64 MiB (`max_blob_bytes`), which is
  what a pack's files are; they are read back in 1 MiB slices, never whole.

A write streams into a temp file while hashing, stops as soon as the size passes the limit, and is
placed (renamed into place, or INSERTed) only when the sha256 equals the name: a stored blob always
matches its name. Writing the same blob twice is harmless (same bytes; the second place is a no-op).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Protocol

from anyio import to_thread
from sqlalchemy import Engine, LargeBinary, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api.config import BlobStoreKind
from api.db import read_session
from api.errors import InvalidRequest, PayloadTooLarge
from api.models import BlobContent

DIGEST_PATTERN = re.compile(r"^sha256:([0-9a-f]{64})$")
CHUNK_BYTES = 1 << 20


def parse_digest(digest: str) -> str:
    """The hex of `sha256:<64 lowercase hex>`, or InvalidRequest."""
    match = DIGEST_PATTERN.fullmatch(digest)
    if match is None:
        raise InvalidRequest(
            f"The blob name {digest[:100]!r} is not sha256:<64 lowercase hex digits>.", field="digest"
        )
    return match.group(1)


class BlobStore(Protocol):
    """What the blob routes and publishing need of a store. The sync methods block: call them in a thread."""

    def size(self, hexdigest: str) -> int | None:
        """The blob's size in bytes, or None when absent."""

    def chunks(self, hexdigest: str) -> Iterator[bytes]:
        """The blob's bytes in pieces of at most 1 MiB (FileNotFoundError when absent)."""

    def local_path(self, hexdigest: str) -> Path | None:
        """The blob's file when the store is a directory (served with sendfile), else None."""

    async def write(self, chunks: AsyncIterator[bytes], *, hexdigest: str, max_bytes: int) -> int:
        """Store a stream under its sha256; returns its size.

        Raises:
            PayloadTooLarge: the stream passed `max_bytes` (nothing is kept).
            InvalidRequest: the bytes do not hash to `hexdigest` (nothing is kept).
        """


def stored_sha256(store: BlobStore, hexdigest: str) -> str:
    """The sha256 of the bytes the store holds under `hexdigest` now (blocks)."""
    h = hashlib.sha256()
    for chunk in store.chunks(hexdigest):
        h.update(chunk)
    return h.hexdigest()


async def _receive(chunks: AsyncIterator[bytes], out: IO[bytes], *, hexdigest: str, max_bytes: int) -> int:
    """Copy a stream into `out` while hashing; its size, once its sha256 is `hexdigest`."""
    hasher = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(
                f"The blob is larger than the limit of {max_bytes} bytes.", limit_bytes=max_bytes
            )
        hasher.update(chunk)
        await to_thread.run_sync(out.write, chunk)
    actual = hasher.hexdigest()
    if actual != hexdigest:
        raise InvalidRequest(
            f"The uploaded bytes hash to sha256:{actual}, not to the blob's name sha256:{hexdigest}.",
            field="digest",
            reason="digest_mismatch",
        )
    return size


class FileBlobStore:
    """Blobs under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, hexdigest: str) -> Path:
        """Where the blob of that sha256 lives (it may not exist)."""
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    def local_path(self, hexdigest: str) -> Path | None:
        return self.path(hexdigest)

    def size(self, hexdigest: str) -> int | None:
        try:
            return self.path(hexdigest).stat().st_size
        except FileNotFoundError:
            return None

    def chunks(self, hexdigest: str) -> Iterator[bytes]:
        with self.path(hexdigest).open("rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                yield chunk

    async def write(self, chunks: AsyncIterator[bytes], *, hexdigest: str, max_bytes: int) -> int:
        tmp_dir = self.root / "tmp"
        await to_thread.run_sync(lambda: private_dir(tmp_dir))
        fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="upload-")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                size = await _receive(chunks, out, hexdigest=hexdigest, max_bytes=max_bytes)
            await to_thread.run_sync(_place, tmp, self.path(hexdigest))
            return size
        finally:
            tmp.unlink(missing_ok=True)


class DatabaseBlobStore:
    """Blobs as rows of the `blobs` table."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def local_path(self, hexdigest: str) -> Path | None:
        return None

    def size(self, hexdigest: str) -> int | None:
        with read_session(self.engine) as session:
            stmt = select(BlobContent.size).where(col(BlobContent.sha256) == hexdigest)
            size: int | None = session.exec(stmt).first()
            return size

    def chunks(self, hexdigest: str) -> Iterator[bytes]:
        size = self.size(hexdigest)
        if size is None:
            raise FileNotFoundError(f"no blob sha256:{hexdigest}")
        for start in range(0, size, CHUNK_BYTES):
            piece = func.substr(col(BlobContent.data), start + 1, CHUNK_BYTES, type_=LargeBinary)
            with read_session(self.engine) as session:
                chunk = session.exec(select(piece).where(col(BlobContent.sha256) == hexdigest)).first()
            if chunk is None:
                raise FileNotFoundError(f"no blob sha256:{hexdigest}")
            yield bytes(chunk)

    async def write(self, chunks: AsyncIterator[bytes], *, hexdigest: str, max_bytes: int) -> int:
        with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK_BYTES) as out:
            size = await _receive(chunks, out, hexdigest=hexdigest, max_bytes=max_bytes)
            await to_thread.run_sync(self._insert, out, hexdigest, size)
        return size

    def _insert(self, spool: IO[bytes], hexdigest: str, size: int) -> None:
        if self.size(hexdigest) is not None:
            return
        spool.seek(0)
        with Session(self.engine) as session:
            session.add(BlobContent(sha256=hexdigest, size=size, data=spool.read()))
            try:
                session.commit()
            except IntegrityError:  # the same bytes were stored concurrently
                session.rollback()


def open_blob_store(kind: BlobStoreKind, *, blob_dir: Path, engine: Engine) -> BlobStore:
    """The store `B3OS_BLOB_STORE` names."""
    if kind == "database":
        return DatabaseBlobStore(engine)
    return FileBlobStore(blob_dir)


def _place(tmp: Path, final: Path) -> None:
    private_dir(final.parent)
    os.replace(tmp, final)  # mkstemp made it 0600


def private_dir(path: Path) -> None:
    """Make `path` and its missing parents 0700: blobs are readable by the api's user only."""
    for parent in reversed([path, *path.parents]):
        if not parent.exists():
            parent.mkdir(mode=0o700, exist_ok=True)
