"""The node's install cache: `<cache>/<namespace>/<name>/<version>/` holds a verified, unpacked `tool/` tree.

A version counts as installed only once its directory has the `installed.json` marker, written last: an
install unpacks into a temporary directory beside its final place and renames it there, so a call never sees
a half-unpacked tool. The cache never holds a version that failed verification.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node.errors import NodeError
from packs.archive import unpack_archive
from packs.names import PACK_ID_RE, SEMVER_RE

MARKER = "installed.json"


class CacheError(NodeError):
    """An install into the cache failed; the message says why."""


class InstallCache:
    """Installed tool versions under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._failed: dict[str, str] = {}

    def mark_failed(self, pack: str, version: str, reason: str) -> None:
        """Remember why a version was not installed (calls to it answer pack_unavailable with this)."""
        self._failed[f"{pack}@{version}"] = reason

    def forget(self, pack: str, version: str, reason: str) -> None:
        """Drop an installed version whose files are no longer usable (it then counts as not installed).

        The marker goes first, so the heartbeat stops listing it at once; `reason` answers later calls.
        """
        try:
            vdir = self.version_dir(pack, version)
        except CacheError:
            return
        with contextlib.suppress(FileNotFoundError):
            (vdir / MARKER).unlink()
        shutil.rmtree(vdir, ignore_errors=True)
        self.mark_failed(pack, version, reason)

    def failure(self, pack: str, version: str) -> str | None:
        """Why a version was refused, if it was."""
        return self._failed.get(f"{pack}@{version}")

    def version_dir(self, pack: str, version: str) -> Path:
        """The directory of `pack` (`ns/name`) at `version`.

        Raises:
            CacheError: the pack or version is not a valid name (never a path outside the cache).
        """
        if PACK_ID_RE.match(pack) is None or SEMVER_RE.match(version) is None:
            raise CacheError(f"{pack}@{version} is not a pack id and exact version")
        namespace, name = pack.split("/")
        return self.root / namespace / name / version

    def tool_dir(self, pack: str, version: str) -> Path | None:
        """The unpacked `tool/` tree of an installed version, or None when it is not installed."""
        try:
            vdir = self.version_dir(pack, version)
        except CacheError:
            return None
        return vdir / "tool" if (vdir / MARKER).is_file() else None

    def manifest(self, pack: str, version: str) -> dict[str, Any] | None:
        """The manifest stored with an installed version, if any."""
        if self.tool_dir(pack, version) is None:
            return None
        path = self.version_dir(pack, version) / "manifest.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def installed(self) -> list[str]:
        """Every installed version as `ns/name@version`, sorted."""
        found = []
        for marker in self.root.glob(f"*/*/*/{MARKER}"):
            vdir = marker.parent
            found.append(f"{vdir.parent.parent.name}/{vdir.parent.name}@{vdir.name}")
        return sorted(found)

    def install_files(
        self, pack: str, version: str, files: dict[str, bytes], manifest: dict[str, Any]
    ) -> Path:
        """Install a verified js pack's code (its js/** bundle files) as `pack@version`; return the tree that
        becomes /tool (`js/...` in it).

        Raises:
            CacheError: a path is not a bundle path under js/.
        """
        from packs.errors import ManifestError
        from packs.hashing import check_bundle_path

        with self._installing(pack, version, manifest) as tool:
            if tool is not None:
                tool.mkdir(mode=0o755)
                for rel, data in sorted(files.items()):
                    try:
                        check_bundle_path(rel)
                    except ManifestError as exc:
                        raise CacheError(f"{pack}@{version}: {exc}") from exc
                    if not rel.startswith("js/"):
                        raise CacheError(f"{pack}@{version}: {rel} is not code under js/")
                    target = tool / rel
                    target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                    target.write_bytes(data)
                    os.chmod(target, 0o644)
                for d in (tool, *(p for p in tool.rglob("*") if p.is_dir())):
                    os.chmod(d, 0o755)
        return self.version_dir(pack, version) / "tool"

    def install_archive(
        self,
        pack: str,
        version: str,
        data: bytes,
        *,
        fmt: str,
        max_unpacked_bytes: int,
        max_entries: int,
        manifest: dict[str, Any] | None = None,
    ) -> Path:
        """Unpack a verified archive as `pack@version` and mark it installed; return its `tool/` dir.

        Raises:
            CacheError: the archive did not unpack within the declared limits (nothing is installed).
        """
        from packs.errors import ArchiveError

        try:
            with self._installing(pack, version, manifest) as tool:
                if tool is not None:
                    unpack_archive(
                        data, tool, fmt=fmt, max_unpacked_bytes=max_unpacked_bytes, max_entries=max_entries
                    )
                    os.chmod(tool, 0o755)
        except ArchiveError as exc:
            raise CacheError(f"{pack}@{version} did not unpack: {exc}") from exc
        return self.version_dir(pack, version) / "tool"

    @contextmanager
    def _installing(self, pack: str, version: str, manifest: dict[str, Any] | None) -> Iterator[Path | None]:
        """The `tool/` tree to lay `pack@version` out in (None: installed already), in a fresh directory
        beside the version's. When the block ends without an error the manifest and the marker are written
        and the directory takes the version's place in one rename; otherwise it is removed."""
        final = self.version_dir(pack, version)
        if (final / MARKER).is_file():
            yield None
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.root, *final.parents[: len(final.parts) - len(self.root.parts) - 1]):
            os.chmod(path, 0o755)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=final.parent))
        try:
            os.chmod(tmp, 0o755)
            yield tmp / "tool"
            if manifest is not None:
                (tmp / "manifest.json").write_text(json.dumps(manifest))
            (tmp / MARKER).write_text(json.dumps({"pack": pack, "version": version}))
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
