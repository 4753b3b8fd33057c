"""A reproducible initramfs archive: the kernel's `newc` cpio format, written in a fixed order.

The same entries give the same bytes: entries are written sorted by path, every inode number is the
entry's position, no entry keeps its host inode, device or link count, and each entry's mtime is clamped
(`min(mtime, clamp)`) so that files made when the base template was installed carry the build's date
while files from packages keep theirs (Python checks a `.pyc` against its source's mtime, so those must
not move).
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

MAGIC = b"070701"
TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    """One archive entry: a path inside the archive (no leading slash), its mode and its content.

    `data` is a regular file's bytes or a symlink's target; `rdev` a device node's (major, minor).
    """

    path: str
    mode: int
    data: bytes = b""
    uid: int = 0
    gid: int = 0
    mtime: int = 0
    rdev: tuple[int, int] = (0, 0)


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _header(ino: int, entry: Entry, name: bytes) -> bytes:
    nlink = 2 if stat.S_ISDIR(entry.mode) else 1
    fields = (
        ino, entry.mode, entry.uid, entry.gid, nlink, entry.mtime, len(entry.data),
        0, 0, entry.rdev[0], entry.rdev[1], len(name) + 1, 0,
    )  # fmt: skip
    return MAGIC + b"".join(b"%08X" % value for value in fields)


def write(out: BinaryIO, entries: Iterable[Entry]) -> int:
    """Write `entries` (sorted by path here) and the trailer; return the bytes written."""
    written = 0
    ordered = sorted(entries, key=lambda e: e.path.encode())
    for ino, entry in enumerate([*ordered, Entry(TRAILER, 0)], start=1):
        name = entry.path.encode()
        head = _header(0 if entry.path == TRAILER else ino, entry, name)
        chunk = head + name + b"\0"
        chunk += _pad(len(chunk))
        out.write(chunk)
        out.write(entry.data)
        out.write(_pad(len(entry.data)))
        written += len(chunk) + len(entry.data) + len(_pad(len(entry.data)))
    tail = b"\0" * (-written % 512)
    out.write(tail)
    return written + len(tail)


def tree(root: str, *, prefix: str = "", skip: tuple[str, ...] = (), clamp: int) -> list[Entry]:
    """The entries of the directory tree at `root` (regular files, directories, symlinks), under `prefix`.

    Device nodes, sockets and fifos are left out (the guest mounts devtmpfs). `skip` holds glob patterns
    of paths relative to `root` left out, with their subtrees.
    """
    pattern = re.compile("|".join(fnmatch.translate(glob) for glob in skip) or "(?!)")
    entries: list[Entry] = []
    for here, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(here, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        dirs[:] = sorted(d for d in dirs if not pattern.match(os.path.join(rel_dir, d)))
        for name in sorted([*dirs, *files]):
            rel = os.path.join(rel_dir, name)
            if pattern.match(rel):
                continue
            full = os.path.join(here, name)
            st = os.lstat(full)
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                data = os.readlink(full).encode()
            elif stat.S_ISREG(mode):
                with open(full, "rb") as fh:
                    data = fh.read()
            elif stat.S_ISDIR(mode):
                data = b""
            else:
                continue
            path = os.path.join(prefix, rel) if prefix else rel
            mtime = min(int(st.st_mtime), clamp)
            entries.append(Entry(path, mode, data, st.st_uid, st.st_gid, mtime))
    return entries
