"""The pack build: (for a tool pack) archive tool/ and fill tool.bundle.archive, run the publish checks,
sign, write.

`build_pack(DIR, kid=...)` builds any pack. A tool pack gets its archive in DIR/.b3os-build/tool.tar;
a declarative pack (no `tool` section) has no archive, and its bundle is NOTICES.md (when present),
fixtures/** and js/** (the code of js actions, checked by `packs.js_files.check_js_files`). The signed
manifest goes back to DIR/b3pack.json; with `out_dir` a complete signed copy of the pack is written there
instead (b3pack.json, .b3os-build/ and tool/ of a tool pack, the notices file, fixtures/, js/) and DIR
is left untouched. With `tool=True` (`b3os tool build`) a pack with no tool
section is refused.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from packs.archive import build_archive
from packs.checks import run_checks
from packs.errors import BuildError, ChecksFailed, ManifestError, SignatureError
from packs.fixtures import fixture_problems
from packs.hashing import BundleFile
from packs.js_files import check_js_files, first_party_namespaces
from packs.loader import (
    BUILD_DIR,
    MANIFEST_NAME,
    PackDir,
    bundle_files,
    load_pack,
    read_manifest,
    write_manifest,
)
from packs.names import split_kid
from packs.signing import load_private_key, sign_manifest


@dataclass(frozen=True)
class BuildResult:
    """What a build wrote: the signed manifest and where, the bundle files, the hash, and for a tool
    pack its archive and where (None for a declarative pack)."""

    manifest: dict[str, Any]
    manifest_path: Path
    files: list[BundleFile]
    hash: str
    archive: bytes | None = None
    archive_path: Path | None = None


def _no_tool_section(pack: PackDir) -> ManifestError:
    return ManifestError(
        f"{pack.root / MANIFEST_NAME} has no tool section: `b3os tool build` builds tool packs; "
        "build a declarative pack with `b3os pack build`"
    )


def fill_archive(pack: PackDir) -> tuple[dict[str, Any], bytes]:
    """Build the archive of tool/ and return a copy of the manifest with tool.bundle.archive filled.

    Raises:
        ManifestError: the pack has no tool section or no tool/ directory.
        BuildError: tool/ holds something the archive refuses.
    """
    manifest = copy.deepcopy(pack.manifest)
    tool = manifest.get("tool")
    if not isinstance(tool, dict):
        raise _no_tool_section(pack)
    if pack.tool_dir is None:
        raise ManifestError(f"{pack.root / 'tool'} is missing: a tool pack keeps its files under tool/")
    data, stats = build_archive(pack.tool_dir, pack.archive_format)
    bundle = tool.get("bundle")
    if not isinstance(bundle, dict):
        bundle = tool["bundle"] = {}
    bundle["archive"] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "format": pack.archive_format,
        "unpackedBytes": stats.unpacked_bytes,
        "entries": stats.entries,
    }
    return manifest, data


def build_pack(
    pack_dir: Path,
    *,
    kid: str,
    keys_dir: Path | None = None,
    out_dir: Path | None = None,
    private_key: Ed25519PrivateKey | None = None,
    tool: bool = False,
) -> BuildResult:
    """Build, check and sign a pack, with a tool or declarative (`tool`: only a pack with a tool section).

    Args:
        pack_dir: the pack directory (b3pack.json; tool/ of a tool pack; the notices file; fixtures/).
        kid: the signing key id "<namespace>#<name>", of the pack's namespace.
        keys_dir: the key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys).
        out_dir: write a signed copy of the pack there instead of in place.
        private_key: sign with this key instead of the key store's (tests).
        tool: refuse a pack without a tool section (`b3os tool build`).

    Raises:
        ManifestError, BuildError: the pack cannot be read or archived, or `tool` and it has no tool section.
        ChecksFailed: the publish checks refused the manifest (every violation).
        KeyStoreError, SignatureError: no key for the kid, or a kid outside the pack's namespace.
    """
    pack = load_pack(Path(pack_dir))
    if tool and not pack.is_tool:
        raise _no_tool_section(pack)
    archive: bytes | None = None
    if pack.is_tool:
        manifest, archive = fill_archive(pack)
    else:
        manifest = copy.deepcopy(pack.manifest)
    manifest.pop("signature", None)
    others = pack.other_files()
    violations = run_checks(manifest, first_party=first_party_namespaces())
    violations = violations or check_js_files(manifest, others) + fixture_problems(manifest, others)
    if violations:
        raise ChecksFailed(violations)
    try:
        namespace, _ = split_kid(kid)
    except ValueError as exc:
        raise SignatureError(str(exc)) from exc
    pack_ns = str(manifest["pack"]).partition("/")[0]
    if namespace != pack_ns:
        raise SignatureError(f'key id {kid!r} is not of the pack\'s namespace: use "{pack_ns}#<name>"')
    key = private_key or load_private_key(kid, keys_dir)
    bundle = {**others, pack.archive_name: archive} if archive is not None else others
    files = bundle_files(bundle)
    signed = sign_manifest(manifest, files, key, kid)

    out = Path(out_dir) if out_dir is not None else pack.root
    if out.resolve() != pack.root.resolve():
        _prepare_out(out)
        if pack.tool_dir is not None:
            shutil.copytree(pack.tool_dir, out / "tool", symlinks=True)
        for rel in others:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pack.root / rel, out / rel)
    archive_path = None
    if archive is not None:
        archive_path = out / BUILD_DIR / pack.archive_name
        archive_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = archive_path.with_name(archive_path.name + ".tmp")
        tmp.write_bytes(archive)
        tmp.replace(archive_path)
    write_manifest(out / MANIFEST_NAME, signed)
    return BuildResult(
        manifest=signed,
        manifest_path=out / MANIFEST_NAME,
        files=files,
        hash=signed["signature"]["hash"],
        archive=archive,
        archive_path=archive_path,
    )


def _earlier_build(out: Path) -> bool:
    """Whether `out` holds a build: a b3pack.json with .b3os-build/ (a tool pack) or a signature."""
    if not (out / MANIFEST_NAME).is_file():
        return False
    if (out / BUILD_DIR).is_dir():
        return True
    try:
        return "signature" in read_manifest(out / MANIFEST_NAME)
    except ManifestError:
        return False


def _prepare_out(out: Path) -> None:
    """Make `out` an empty directory; it may hold an earlier build, which is removed."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file: give a directory")
    if out.is_dir() and any(out.iterdir()):
        if not _earlier_build(out):
            raise BuildError(f"--out {out} is not empty and holds no earlier build: give an empty directory")
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
