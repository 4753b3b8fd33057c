"""Verifying a pack directory: archive from tool/, publish checks, content hash and signature.

Unlike `packs.signing.verify_manifest`, which raises at the first problem, `verify_pack_dir`
collects every mismatch so that `b3os pack verify` can print them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packs.archive import build_archive
from packs.checks import run_checks
from packs.errors import BuildError, HashMismatchError, KeyStoreError, ManifestError, SignatureError
from packs.fixtures import fixture_problems
from packs.hashing import BundleFile
from packs.js_files import check_js_files, first_party_namespaces
from packs.loader import PackDir, bundle_files, load_pack
from packs.signing import load_public_key_b64, verify_manifest


@dataclass
class VerifyReport:
    """The outcome: `problems` (sentences; empty when the pack verifies), the hash and the kid."""

    problems: list[str] = field(default_factory=list)
    hash: str | None = None
    kid: str | None = None
    pack: str | None = None
    version: str | None = None

    @property
    def ok(self) -> bool:
        """Whether nothing failed to match."""
        return not self.problems


def _declared_archive(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    tool = manifest.get("tool")
    bundle = tool.get("bundle") if isinstance(tool, Mapping) else None
    archive = bundle.get("archive") if isinstance(bundle, Mapping) else None
    return archive if isinstance(archive, Mapping) else {}


def _check_archive(pack: PackDir, report: VerifyReport) -> None:
    declared = _declared_archive(pack.manifest)
    built = pack.built_archive_path
    if pack.tool_dir is not None:
        try:
            data, stats = build_archive(pack.tool_dir, pack.archive_format)
        except BuildError as exc:
            report.problems.append(str(exc))
            return
        source = "the archive built from tool/"
        if built.is_file() and built.read_bytes() != data:
            report.problems.append(f"{built} differs from {source}: rebuild with `b3os tool build`")
    elif built.is_file():
        data = built.read_bytes()
        stats = None
        source = str(built)
    else:
        report.problems.append(
            f"{pack.root / 'tool'} and {built} are missing: nothing to verify the archive with"
        )
        return
    actual: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    if stats is not None:
        actual.update(unpackedBytes=stats.unpacked_bytes, entries=stats.entries)
    for key, value in actual.items():
        if declared.get(key) != value:
            report.problems.append(
                f"tool.bundle.archive.{key} is {declared.get(key)!r} but {source} has {value!r}: "
                "a file under tool/ changed after the build"
            )


def verify_pack_dir(
    root: Path, *, public_key_b64: str | None = None, keys_dir: Path | None = None
) -> VerifyReport:
    """Recompute everything of a built pack directory and report every mismatch.

    Args:
        root: the pack directory.
        public_key_b64: the publisher's public key; default: the key store's key of the signature's kid.
        keys_dir: the key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys).
    """
    report = VerifyReport()
    try:
        pack = load_pack(Path(root))
    except ManifestError as exc:
        report.problems.append(str(exc))
        return report
    m = pack.manifest
    report.pack, report.version = str(m.get("pack")), str(m.get("version"))
    sig = m.get("signature")
    report.kid = str(sig.get("kid")) if isinstance(sig, Mapping) else None
    if pack.is_tool:
        _check_archive(pack, report)
    violations = run_checks(m, first_party=first_party_namespaces())
    others = pack.other_files()
    violations = violations or check_js_files(m, others) + fixture_problems(m, others)
    report.problems.extend(v.message for v in violations)
    files: list[BundleFile] = bundle_files(others)
    if pack.is_tool:
        declared = _declared_archive(m)
        try:
            files.append(
                BundleFile(pack.archive_name, str(declared.get("sha256")), int(declared.get("bytes", 0)))
            )
        except (TypeError, ValueError):
            pass
    key = public_key_b64
    if key is None and report.kid is not None:
        try:
            key = load_public_key_b64(report.kid, keys_dir)
        except KeyStoreError as exc:
            report.problems.append(str(exc))
    try:
        report.hash = verify_manifest(m, files, key or "")
    except (SignatureError, HashMismatchError, ManifestError) as exc:
        if key is not None or not isinstance(exc, SignatureError) or "public key" not in str(exc):
            report.problems.append(str(exc))
    return report
