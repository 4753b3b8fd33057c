"""Tool archives: the deterministic tar of tool/, and the safe unpack a node uses.

Determinism (docs/packs.md, "The archive"): entries sorted by their path segments (a directory
right before its contents), PAX format, mtime 0, uid/gid 0, empty uname/gname, directories 0755,
files 0755 when any run bit is set and 0644 otherwise, symlinks 0777; tar.gz is gzip level 9 with
mtime 0 and no file name. Only regular files, directories and symlinks that stay inside are taken.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from packs.errors import ArchiveError, BuildError

FORMATS = ("tar", "tar.gz")
MAX_PACKED_BYTES = 64 * 1024 * 1024
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_ENTRIES = 20_000


@dataclass(frozen=True)
class ArchiveStats:
    """What an archive holds: `entries` (files, directories, symlinks) and `unpacked_bytes` (file sizes)."""

    entries: int
    unpacked_bytes: int


def symlink_stays_inside(parent_depth: int, target: str) -> bool:
    """Whether a relative symlink target, from a directory `parent_depth` levels below the root, stays inside.

    The target must be zero or more leading ".." (no more than `parent_depth`) followed by plain
    names: no "." or ".." after a name and no absolute path. With no entry placed under a symlink,
    that makes the lexical answer the real one.
    """
    if not target or target.startswith("/") or "\0" in target:
        return False
    parts = target.rstrip("/").split("/")
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    rest = parts[ups:]
    if ups > parent_depth or any(p in ("", ".", "..") for p in rest):
        return False
    return bool(rest) or ups > 0


# Build ------------------------------------------------------------------------------------------------


def build_archive(root: Path, fmt: str = "tar") -> tuple[bytes, ArchiveStats]:
    """The archive of the contents of directory `root`, byte-identical for the same files.

    Raises:
        BuildError: `root` is missing, or holds a device file, fifo, socket, hard link, a symlink that
            leaves it, or a name that is not UTF-8 text.
    """
    if fmt not in FORMATS:
        raise BuildError(f'archive format {fmt!r} is not accepted: use "tar" or "tar.gz"')
    if not root.is_dir() or root.is_symlink():
        raise BuildError(f"{root} is not a directory: a tool pack keeps its files under tool/")
    entries: list[tuple[tuple[str, ...], os.stat_result]] = []
    _walk(root, (), entries)
    entries.sort(key=lambda e: e[0])
    buf = io.BytesIO()
    unpacked = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for parts, st in entries:
            rel = "/".join(parts)
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            path = root.joinpath(*parts)
            if stat.S_ISLNK(st.st_mode):
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
                tar.addfile(info)
            elif stat.S_ISDIR(st.st_mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.type, info.size = tarfile.REGTYPE, len(data)
                info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                unpacked += len(data)
                tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    if fmt == "tar.gz":
        out = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
            gz.write(raw)
        raw = out.getvalue()
    return raw, ArchiveStats(entries=len(entries), unpacked_bytes=unpacked)


def _walk(root: Path, parts: tuple[str, ...], out: list[tuple[tuple[str, ...], os.stat_result]]) -> None:
    with os.scandir(root.joinpath(*parts)) as it:
        children = sorted(it, key=lambda d: d.name)
    for child in children:
        name = child.name
        rel = "tool/" + "/".join((*parts, name))
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise BuildError(f"{rel!r}: the file name is not UTF-8 text") from None
        if any(ord(c) < 32 or c == "\\" for c in name):
            raise BuildError(f"{rel!r}: the file name holds a control character or a backslash")
        st = child.stat(follow_symlinks=False)
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            target = os.readlink(child.path)
            if not symlink_stays_inside(len(parts), target):
                raise BuildError(
                    f"{rel} is a symlink to {target!r}, which leaves tool/: use a relative link "
                    "of leading '..' and names that stays inside tool/, or copy the file"
                )
            out.append(((*parts, name), st))
        elif stat.S_ISDIR(mode):
            out.append(((*parts, name), st))
            _walk(root, (*parts, name), out)
        elif stat.S_ISREG(mode):
            if st.st_nlink > 1:
                raise BuildError(
                    f"{rel} is a hard link ({st.st_nlink} names for one file): "
                    "the archive takes no hard links, copy the file instead"
                )
            out.append(((*parts, name), st))
        else:
            kind = "a special file"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "a device file"
            elif stat.S_ISFIFO(mode):
                kind = "a fifo"
            elif stat.S_ISSOCK(mode):
                kind = "a socket"
            raise BuildError(
                f"{rel} is {kind}: the archive takes only regular files, directories "
                "and symlinks that stay inside tool/"
            )


# Unpack -----------------------------------------------------------------------------------------------


def unpack_archive(
    data: bytes, dest: Path, *, fmt: str = "tar", max_unpacked_bytes: int, max_entries: int
) -> ArchiveStats:
    """Unpack an archive into `dest` (created if absent, else it must be empty), never writing outside it.

    Every header is checked before anything is written: a hostile archive leaves `dest` untouched.

    Args:
        data: the archive's bytes.
        dest: the directory to unpack into.
        fmt: "tar" or "tar.gz".
        max_unpacked_bytes: the declared `unpackedBytes`; a larger sum of file sizes is refused.
        max_entries: the declared `entries`; more entries are refused.

    Raises:
        ArchiveError: a malformed archive, an absolute path or "..", a symlink that leaves, a hard
            link, a device file or fifo, a duplicate entry, an entry under a symlink, or more entries
            or bytes than declared.
    """
    if fmt not in FORMATS:
        raise ArchiveError(f'archive format {fmt!r} is not accepted: use "tar" or "tar.gz"')
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz" if fmt == "tar.gz" else "r:")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"the archive is not a valid {fmt} file: {exc}") from exc
    with tar:
        members = _check_members(tar, max_unpacked_bytes=max_unpacked_bytes, max_entries=max_entries)
        created = not dest.exists()
        dest.mkdir(parents=True, exist_ok=True)
        if not created and any(dest.iterdir()):
            raise ArchiveError(f"{dest} is not empty: an archive unpacks only into an empty directory")
        try:
            total = 0
            for member, parts in members:
                total += _extract(tar, member, dest, parts)
        except (ArchiveError, OSError, tarfile.TarError, EOFError) as exc:
            if created:
                shutil.rmtree(dest, ignore_errors=True)
            else:
                _empty(dest)
            if isinstance(exc, ArchiveError):
                raise
            raise ArchiveError(f"the archive did not unpack: {exc}") from exc
    return ArchiveStats(entries=len(members), unpacked_bytes=total)


def _check_members(
    tar: tarfile.TarFile, *, max_unpacked_bytes: int, max_entries: int
) -> list[tuple[tarfile.TarInfo, tuple[str, ...]]]:
    kinds: dict[tuple[str, ...], str] = {}
    members: list[tuple[tarfile.TarInfo, tuple[str, ...]]] = []
    total = 0
    try:
        for m in tar:
            if len(members) >= max_entries:
                raise ArchiveError(f"the archive holds more than {max_entries} entries, the number declared")
            name = m.name
            if name.startswith("/") or "\0" in name or "\\" in name:
                raise ArchiveError(f"archive entry {name!r} has an absolute or malformed path")
            parts = tuple(p for p in name.split("/") if p not in ("", "."))
            if not parts:
                raise ArchiveError(f"archive entry {name!r} has an empty path")
            if ".." in parts:
                raise ArchiveError(f"archive entry {name!r} climbs out with '..'")
            for i in range(1, len(parts)):
                kind = kinds.setdefault(parts[:i], "dir")
                if kind != "dir":
                    raise ArchiveError(
                        f"archive entry {name!r} lies under {'/'.join(parts[:i])!r}, which is a {kind}"
                    )
            prior = kinds.get(parts)
            if prior is not None and not (prior == "dir" and m.isdir()):
                raise ArchiveError(f"archive entry {name!r} appears twice")
            if m.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                kinds[parts] = "file"
                total += m.size
                if total > max_unpacked_bytes:
                    raise ArchiveError(
                        f"the archive unpacks to more than {max_unpacked_bytes} bytes, the size declared"
                    )
            elif m.isdir():
                kinds[parts] = "dir"
            elif m.issym():
                if not symlink_stays_inside(len(parts) - 1, m.linkname):
                    raise ArchiveError(
                        f"archive entry {name!r} is a symlink to {m.linkname!r}, which leaves the archive"
                    )
                kinds[parts] = "symlink"
            elif m.islnk():
                raise ArchiveError(f"archive entry {name!r} is a hard link: hard links are refused")
            elif m.ischr() or m.isblk():
                raise ArchiveError(f"archive entry {name!r} is a device file: device files are refused")
            elif m.isfifo():
                raise ArchiveError(f"archive entry {name!r} is a fifo: fifos are refused")
            else:
                raise ArchiveError(
                    f"archive entry {name!r} has type {m.type!r}: only regular files, "
                    "directories and symlinks are accepted"
                )
            members.append((m, parts))
    except tarfile.TarError as exc:
        raise ArchiveError(f"the archive is not a valid tar file: {exc}") from exc
    return members


def _extract(tar: tarfile.TarFile, m: tarfile.TarInfo, dest: Path, parts: tuple[str, ...]) -> int:
    path = dest.joinpath(*parts)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if m.isdir():
        path.mkdir(mode=0o755, exist_ok=True)
        os.chmod(path, 0o755)
        return 0
    if m.issym():
        os.symlink(m.linkname, path)
        return 0
    src = tar.extractfile(m)
    if src is None:
        raise ArchiveError(f"archive entry {m.name!r} has no data")
    mode = 0o755 if m.mode & 0o111 else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    written = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := src.read(1 << 20):
            written += len(chunk)
            if written > m.size:
                raise ArchiveError(f"archive entry {m.name!r} holds more bytes than its header says")
            out.write(chunk)
    os.chmod(path, mode)
    return written


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
