"""The tool build: archive tool/, fill tool.bundle.archive, run the publish checks, sign, write.

`build_tool(DIR, kid=...)` writes the signed manifest to DIR/b3pack.json and the archive to
DIR/.b3os-build/tool.tar; with `out_dir` it writes a complete signed copy of the pack there instead
(b3pack.json, .b3os-build/, tool/, the notices file, fixtures/) and leaves DIR untouched.
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
from packs.hashing import BundleFile
from packs.loader import BUILD_DIR, MANIFEST_NAME, PackDir, bundle_files, load_pack, write_manifest
from packs.names import split_kid
from packs.signing import load_private_key, sign_manifest


@dataclass(frozen=True)
class BuildResult:
    """What a build wrote: the signed manifest and where, the archive, the bundle files and the hash."""

    manifest: dict[str, Any]
    manifest_path: Path
    archive: bytes
    archive_path: Path
    files: list[BundleFile]
    hash: str


def fill_archive(pack: PackDir) -> tuple[dict[str, Any], bytes]:
    """Build the archive of tool/ and return a copy of the manifest with tool.bundle.archive filled.

    Raises:
        ManifestError: the pack has no tool section or no tool/ directory.
        BuildError: tool/ holds something the archive refuses.
    """
    manifest = copy.deepcopy(pack.manifest)
    tool = manifest.get("tool")
    if not isinstance(tool, dict):
        raise ManifestError(
            f"{pack.root / MANIFEST_NAME} has no tool section: `b3os tool build` builds tool packs"
        )
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


def build_tool(
    pack_dir: Path,
    *,
    kid: str,
    keys_dir: Path | None = None,
    out_dir: Path | None = None,
    private_key: Ed25519PrivateKey | None = None,
) -> BuildResult:
    """Build, check and sign a tool pack.

    Args:
        pack_dir: the pack directory (b3pack.json, tool/, the notices file, fixtures/).
        kid: the signing key id "<namespace>#<name>", of the pack's namespace.
        keys_dir: the key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys).
        out_dir: write a signed copy of the pack there instead of in place.
        private_key: sign with this key instead of the key store's (tests).

    Raises:
        ManifestError, BuildError: the pack cannot be read or archived.
        ChecksFailed: the publish checks refused the manifest (every violation).
        KeyStoreError, SignatureError: no key for the kid, or a kid outside the pack's namespace.
    """
    pack = load_pack(Path(pack_dir))
    manifest, archive = fill_archive(pack)
    manifest.pop("signature", None)
    violations = run_checks(manifest)
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
    others = pack.other_files()
    files = bundle_files({**others, pack.archive_name: archive})
    signed = sign_manifest(manifest, files, key, kid)

    out = Path(out_dir) if out_dir is not None else pack.root
    if out.resolve() != pack.root.resolve():
        _prepare_out(out)
        assert pack.tool_dir is not None
        shutil.copytree(pack.tool_dir, out / "tool", symlinks=True)
        for rel in others:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pack.root / rel, out / rel)
    archive_path = out / BUILD_DIR / pack.archive_name
    archive_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive_path.with_name(archive_path.name + ".tmp")
    tmp.write_bytes(archive)
    tmp.replace(archive_path)
    write_manifest(out / MANIFEST_NAME, signed)
    return BuildResult(
        manifest=signed,
        manifest_path=out / MANIFEST_NAME,
        archive=archive,
        archive_path=archive_path,
        files=files,
        hash=signed["signature"]["hash"],
    )


def _prepare_out(out: Path) -> None:
    """Make `out` an empty directory; it may hold an earlier build (b3pack.json and .b3os-build/)."""
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file: give a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MANIFEST_NAME).is_file() or not (out / BUILD_DIR).is_dir():
            raise BuildError(f"--out {out} is not empty and holds no earlier build: give an empty directory")
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)
