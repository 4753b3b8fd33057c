"""Loading a pack directory: b3pack.json, tool/, the notices file, fixtures/ and a built archive.

A pack directory::

    b3pack.json            the manifest (signed after `b3os pack build` or `b3os tool build`)
    tool/                  the tool's files, unpacked at /tool in the VM (tool packs)
    NOTICES.md             the notices file: the one tool.notices names (tool packs), else when present
    fixtures/**            example inputs and outputs, part of the bundle
    .b3os-build/tool.tar   the archive the build wrote (tool.tar.gz for format "tar.gz"; tool packs)

A declarative pack (no `tool` section) has no archive: its bundle is the manifest, NOTICES.md when
present, fixtures/** and js/**.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packs.errors import ManifestError
from packs.hashing import ARCHIVE_PATHS, BundleFile, check_bundle_path
from packs.js_files import js_file_problem

MANIFEST_NAME = "b3pack.json"
BUILD_DIR = ".b3os-build"
NOTICES_NAME = "NOTICES.md"
MAX_MANIFEST_BYTES = 1024 * 1024


@dataclass
class PackDir:
    """A pack directory as found on disk.

    Attributes:
        root: the directory.
        manifest: b3pack.json as a JSON object.
        tool_dir: root/tool when the pack is a tool pack and it exists.
        notices: the notices file's path relative to root: tool.notices of a tool pack, NOTICES.md of a
            declarative pack that has one.
        fixtures: the files under fixtures/, relative POSIX paths, sorted.
        js: the files under js/ (the code of js actions), relative POSIX paths, sorted.
    """

    root: Path
    manifest: dict[str, Any]
    tool_dir: Path | None = None
    notices: str | None = None
    fixtures: list[str] = field(default_factory=list)
    js: list[str] = field(default_factory=list)

    @property
    def is_tool(self) -> bool:
        """Whether the manifest has a tool section."""
        return isinstance(self.manifest.get("tool"), Mapping)

    @property
    def archive_format(self) -> str:
        """The declared archive format, "tar" unless the manifest says "tar.gz"."""
        tool = self.manifest.get("tool")
        bundle = tool.get("bundle") if isinstance(tool, Mapping) else None
        archive = bundle.get("archive") if isinstance(bundle, Mapping) else None
        fmt = archive.get("format") if isinstance(archive, Mapping) else None
        return fmt if fmt in ARCHIVE_PATHS else "tar"

    @property
    def archive_name(self) -> str:
        """The archive's bundle path: "tool.tar" or "tool.tar.gz"."""
        return ARCHIVE_PATHS[self.archive_format]

    @property
    def built_archive_path(self) -> Path:
        """Where the build writes the archive: root/.b3os-build/tool.tar(.gz)."""
        return self.root / BUILD_DIR / self.archive_name

    def other_files(self) -> dict[str, bytes]:
        """The bundle files other than the archive (notices, fixtures/** and js/**), path -> bytes."""
        out: dict[str, bytes] = {}
        for rel in ([self.notices] if self.notices else []) + self.fixtures + self.js:
            out[rel] = (self.root / rel).read_bytes()
        return out


def read_manifest(path: Path) -> dict[str, Any]:
    """Read and parse a b3pack.json.

    Raises:
        ManifestError: the file is missing, too large, not UTF-8 JSON, or not a JSON object.
    """
    if not path.is_file():
        raise ManifestError(f"{path} is missing: a pack directory has a b3pack.json at its root")
    data = path.read_bytes()
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path} has {len(data)} bytes: a manifest has at most {MAX_MANIFEST_BYTES}")
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc
    if not isinstance(value, dict):
        raise ManifestError(f"{path} holds a JSON {type(value).__name__}: a manifest is a JSON object")
    return value


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write a manifest as indented UTF-8 JSON with a final newline, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_pack(root: Path) -> PackDir:
    """Load a pack directory and check that the files its manifest names are there.

    Raises:
        ManifestError: no or a malformed b3pack.json, a tool pack without tool/, a missing notices
            file, or a fixture that is not a regular file with an accepted name.
    """
    root = Path(root)
    if not root.is_dir():
        raise ManifestError(f"{root} is not a directory: a pack is a directory with a b3pack.json")
    manifest = read_manifest(root / MANIFEST_NAME)
    pack = PackDir(root=root, manifest=manifest)
    tool = manifest.get("tool")
    if isinstance(tool, Mapping):
        tool_dir = root / "tool"
        if tool_dir.is_dir() and not tool_dir.is_symlink():
            pack.tool_dir = tool_dir
        notices = tool.get("notices")
        if isinstance(notices, str):
            try:
                check_bundle_path(notices)
            except ManifestError as exc:
                raise ManifestError(f"tool.notices: {exc}") from exc
            path = root / notices
            if not path.is_file() or path.is_symlink():
                raise ManifestError(f"{path} is missing: tool.notices names {notices!r}, a file of the pack")
            pack.notices = notices
    elif (root / NOTICES_NAME).is_file() and not (root / NOTICES_NAME).is_symlink():
        pack.notices = NOTICES_NAME
    pack.fixtures = _tree(root, "fixtures")
    pack.js = _tree(root, "js")
    for rel in pack.js:
        problem = js_file_problem(rel, (root / rel).stat().st_size)
        if problem is not None:
            raise ManifestError(problem)
    return pack


def _tree(root: Path, name: str) -> list[str]:
    """The regular files under root/name, relative POSIX paths, sorted (fixtures/ or js/)."""
    base = root / name
    if not base.exists():
        return []
    if base.is_symlink() or not base.is_dir():
        raise ManifestError(f"{base} is not a directory")
    out = []
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(root).as_posix()
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise ManifestError(f"{rel} is not a regular file: {name}/ holds only files and directories")
        try:
            check_bundle_path(rel)
        except ManifestError as exc:
            raise ManifestError(f"{'fixture' if name == 'fixtures' else 'file'} {exc}") from exc
        out.append(rel)
    return out


def bundle_files(files: Mapping[str, bytes]) -> list[BundleFile]:
    """The BundleFile records of path -> bytes, sorted by path."""
    return [BundleFile.of(path, data) for path, data in sorted(files.items())]


def load_built_bundle(root: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The signed manifest and every bundle file (path -> bytes) of a built pack directory.

    This is what a publish uploads: each file as a blob, then the manifest with the files' records.

    A tool pack's bundle holds its built archive; a declarative pack's is its signed b3pack.json with
    NOTICES.md (when present) and fixtures/**.

    Raises:
        ManifestError: the manifest or a file it names is missing, a tool pack was not built, or a
            declarative pack is not signed.
    """
    pack = load_pack(root)
    files = pack.other_files()
    if pack.is_tool:
        path = pack.built_archive_path
        if not path.is_file():
            raise ManifestError(
                f"{path} is missing: build the pack first with `b3os pack build {root} --kid ...`"
            )
        files[pack.archive_name] = path.read_bytes()
    elif "signature" not in pack.manifest:
        raise ManifestError(
            f"{pack.root / MANIFEST_NAME} is not signed: build the pack first with "
            f"`b3os pack build {root} --kid ...`"
        )
    return pack.manifest, files
