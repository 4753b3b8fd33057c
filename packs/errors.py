"""Errors of the pack format.

One root, so that callers can catch everything the pack format raises at once::

    PackError
     ├── RefError            an action ref such as "ns/pack/action@1" does not parse
     ├── ManifestError       b3pack.json cannot be read, parsed or modelled
     ├── ChecksFailed        the publish checks refused the manifest (all violations at once)
     ├── ArchiveError        an archive is hostile, malformed or bigger than declared
     ├── BuildError          tool/ holds something the build refuses (device, fifo, hard link, ...)
     ├── KeyStoreError       a signing key is missing, malformed or already exists
     ├── SignatureError      the signature block is missing or malformed, or does not verify
     └── HashMismatchError   the recomputed content hash (or archive digest) differs from the signed one

Every error carries a sentence that names the field or file and the value at fault; `ChecksFailed` carries
each `Violation`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One refused value: `check` number, `field` path (such as "tool.size") and the full sentence."""

    check: int
    field: str
    message: str


class PackError(Exception):
    """Root of every error the pack format raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RefError(PackError, ValueError):
    """An action ref or pack id does not parse."""


class ManifestError(PackError):
    """A manifest cannot be read, parsed or modelled."""


class ChecksFailed(PackError):
    """The publish checks refused a manifest; `violations` holds every one of them."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = list(violations)
        super().__init__("\n".join(v.message for v in self.violations))


class ArchiveError(PackError):
    """An archive is hostile, malformed or bigger than its manifest declares."""


class BuildError(PackError):
    """The tool directory holds something the deterministic build refuses."""


class KeyStoreError(PackError):
    """A signing key is missing, malformed, or would be overwritten."""


class SignatureError(PackError):
    """The signature block is missing or malformed, or the signature does not verify."""


class HashMismatchError(PackError):
    """A recomputed digest differs from the one the manifest or its signature records."""
