"""Content-addressed blobs on disk: `<root>/sha256/<ab>/<hex>`.

A write streams into a temp file under `<root>/tmp` while hashing, stops as soon as the size passes
the limit, and is renamed into place only when the sha256 equals the name: a blob on disk always
matches its name. Writing the same blob twice is harmless (same bytes, atomic rename).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from anyio import to_thread

from api.errors import InvalidRequest, PayloadTooLarge

DIGEST_PATTERN = re.compile(r"^sha256:([0-9a-f]{64})$")


def parse_digest(digest: str) -> str:
    """The hex of `sha256:<64 lowercase hex>`, or InvalidRequest."""
    match = DIGEST_PATTERN.fullmatch(digest)
    if match is None:
        raise InvalidRequest(
            f"The blob name {digest[:100]!r} is not sha256:<64 lowercase hex digits>.", field="digest"
        )
    return match.group(1)


class BlobStore:
    """Blobs under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, hexdigest: str) -> Path:
        """Where the blob of that sha256 lives (it may not exist)."""
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    def size(self, hexdigest: str) -> int | None:
        """The blob's size in bytes, or None when absent."""
        try:
            return self.path(hexdigest).stat().st_size
        except FileNotFoundError:
            return None

    def read(self, hexdigest: str) -> bytes:
        """The bytes of a blob (FileNotFoundError when absent)."""
        return self.path(hexdigest).read_bytes()

    async def write(self, chunks: AsyncIterator[bytes], *, hexdigest: str, max_bytes: int) -> int:
        """Store a stream under its sha256; returns its size.

        Raises:
            PayloadTooLarge: the stream passed `max_bytes` (nothing is kept).
            InvalidRequest: the bytes do not hash to `hexdigest` (nothing is kept).
        """
        tmp_dir = self.root / "tmp"
        await to_thread.run_sync(lambda: private_dir(tmp_dir))
        fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="upload-")
        tmp = Path(tmp_name)
        hasher = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise PayloadTooLarge(
                            f"The blob is larger than the limit of {max_bytes} bytes.", limit_bytes=max_bytes
                        )
                    hasher.update(chunk)
                    await to_thread.run_sync(_write, out, chunk)
            actual = hasher.hexdigest()
            if actual != hexdigest:
                raise InvalidRequest(
                    f"The uploaded bytes hash to sha256:{actual}, not to the blob's name sha256:{hexdigest}.",
                    field="digest",
                    reason="digest_mismatch",
                )
            final = self.path(hexdigest)
            await to_thread.run_sync(_place, tmp, final)
            return size
        finally:
            tmp.unlink(missing_ok=True)


def _write(out: BinaryIO, chunk: bytes) -> None:
    out.write(chunk)


def _place(tmp: Path, final: Path) -> None:
    private_dir(final.parent)
    os.replace(tmp, final)  # mkstemp made it 0600


def private_dir(path: Path) -> None:
    """Make `path` and its missing parents 0700: blobs are readable by the api's user only."""
    for parent in reversed([path, *path.parents]):
        if not parent.exists():
            parent.mkdir(mode=0o700, exist_ok=True)
