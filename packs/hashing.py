"""The content hash of a pack version: RFC 8785 over the manifest without its signature, plus its files.

The exact bytes (written down in docs/packs.md, "Content hash")::

    hash = "sha256:" + hex(sha256(b"b3pack-content-v1\\n" + JCS(document)))
    document = {"manifest": <the manifest without its top-level "signature">,
                "files": [{"path": p, "sha256": <lowercase hex>, "bytes": n}, ...sorted by path]}

JCS is RFC 8785 (the `rfc8785` package). Paths are POSIX, relative to the pack directory, and sorted
by their Unicode code points (the same order as their UTF-8 bytes).
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785

from packs.errors import ManifestError
from packs.names import is_file_name

CONTENT_DOMAIN = b"b3pack-content-v1\n"
ARCHIVE_PATHS = {"tar": "tool.tar", "tar.gz": "tool.tar.gz"}


@dataclass(frozen=True)
class BundleFile:
    """One file of a pack bundle.

    Attributes:
        path: POSIX path relative to the pack directory ("tool.tar", "NOTICES.md", "fixtures/echo.json").
        sha256: lowercase hex digest of the file's bytes.
        bytes: the file's size.
    """

    path: str
    sha256: str
    bytes: int

    @classmethod
    def of(cls, path: str, data: builtins.bytes) -> BundleFile:
        """The bundle file record of `data` stored at `path`."""
        return cls(path=path, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> BundleFile:
        """Read {"path", "sha256", "bytes"} (as sent in a publish body or by the registry)."""
        try:
            return cls(path=str(value["path"]), sha256=str(value["sha256"]), bytes=int(value["bytes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(
                f"bundle file {dict(value)!r} is not accepted: use "
                f'{{"path": ..., "sha256": ..., "bytes": ...}}'
            ) from exc

    def to_dict(self) -> dict[str, Any]:
        """{"path", "sha256", "bytes"}."""
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes}


def check_bundle_path(path: str) -> None:
    """Refuse a bundle path that is not a relative POSIX path of accepted file names.

    Raises:
        ManifestError: naming the path.
    """
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or not all(is_file_name(p) for p in parts):
        raise ManifestError(
            f"bundle file path {path!r} is not accepted: use a relative POSIX path whose every "
            "segment matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
        )


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) serialization of `value`.

    Raises:
        ManifestError: when the value holds something JCS cannot serialize (NaN, an integer beyond
            2**53, a non-string key...).
    """
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise ManifestError(f"the manifest cannot be serialized with RFC 8785: {exc}") from exc


def unsigned(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest without its top-level "signature"."""
    return {k: v for k, v in manifest.items() if k != "signature"}


def content_document(manifest: Mapping[str, Any], files: Sequence[BundleFile]) -> dict[str, Any]:
    """The document whose JCS bytes are hashed; files sorted by path, duplicates refused."""
    ordered = sorted(files, key=lambda f: f.path)
    for f in ordered:
        check_bundle_path(f.path)
        if len(f.sha256) != 64 or any(c not in "0123456789abcdef" for c in f.sha256):
            raise ManifestError(f"bundle file {f.path!r}: sha256 {f.sha256!r} is not 64 lowercase hex digits")
        if f.bytes < 0:
            raise ManifestError(f"bundle file {f.path!r}: bytes {f.bytes} is negative")
    for a, b in zip(ordered, ordered[1:], strict=False):
        if a.path == b.path:
            raise ManifestError(f"bundle file {a.path!r} is listed twice")
    return {"manifest": unsigned(manifest), "files": [f.to_dict() for f in ordered]}


def content_hash(manifest: Mapping[str, Any], files: Sequence[BundleFile]) -> str:
    """The content hash "sha256:<hex>" of a manifest (its signature left out) and its bundle files.

    Args:
        manifest: the manifest as a JSON object; a top-level "signature" is ignored.
        files: every file of the pack bundle (the archive, the notices file, fixtures/**).

    Raises:
        ManifestError: a path, digest or value that cannot be hashed.
    """
    data = CONTENT_DOMAIN + canonical_json(content_document(manifest, files))
    return "sha256:" + hashlib.sha256(data).hexdigest()
