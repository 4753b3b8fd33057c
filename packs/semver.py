"""Versions and caret ranges: "1.2.3" and "^1.1" (>=1.1.0 <2.0.0), "^0.5" (>=0.5.0 <0.6.0)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packs.names import SEMVER_RE

_CARET_RE = re.compile(r"^\^(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?(?:\.(0|[1-9][0-9]*))?$")

Version = tuple[int, int, int]

# The version of this engine: a manifest's `engine` range must admit it.
ENGINE_VERSION = "1.1.0"


def parse_version(text: str) -> Version:
    """Parse "MAJOR.MINOR.PATCH".

    Raises:
        ValueError: when the text is not an exact version without leading zeros.
    """
    m = SEMVER_RE.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"version {text!r} is not MAJOR.MINOR.PATCH")
    return int(m[1]), int(m[2]), int(m[3])


@dataclass(frozen=True)
class CaretRange:
    """A caret range: the lowest admitted version and the first version it no longer admits."""

    text: str
    lowest: Version
    below: Version

    @classmethod
    def parse(cls, text: str) -> CaretRange:
        """Parse "^MAJOR", "^MAJOR.MINOR" or "^MAJOR.MINOR.PATCH" with npm caret semantics.

        Raises:
            ValueError: when the text is not such a range.
        """
        m = _CARET_RE.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"engine range {text!r} is not a caret range")
        major, minor, patch = int(m[1]), int(m[2] or 0), int(m[3] or 0)
        if major > 0 or m[2] is None:
            below = (major + 1, 0, 0)
        elif minor > 0 or m[3] is None:
            below = (0, minor + 1, 0)
        else:
            below = (0, 0, patch + 1)
        return cls(text=text, lowest=(major, minor, patch), below=below)

    def admits(self, version: str | Version) -> bool:
        """Whether the range admits `version`."""
        v = parse_version(version) if isinstance(version, str) else version
        return self.lowest <= v < self.below
