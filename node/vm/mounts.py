"""Host mounts the bwrap driver makes (as root): bind mounts and size-limited tmpfs, through libc.

Also the one process setting the driver needs: being the child subreaper of its VMs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class MountError(Exception):
    """A mount or unmount failed; the message names the path and the reason."""


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str | None) -> None:
    res = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if res != 0:
        err = ctypes.get_errno()
        raise MountError(f"cannot mount {source} on {target}: {os.strerror(err)}")


def bind(source: Path, target: Path, *, read_only: bool) -> None:
    """Bind `source` on `target` (recursively), read-only when asked."""
    _mount(str(source), target, None, MS_BIND | MS_REC, None)
    try:
        _mount("none", target, None, MS_PRIVATE | MS_REC, None)
        if read_only:
            _mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    except MountError:
        unmount(target)
        raise


def tmpfs(target: Path, *, size_bytes: int, uid: int, gid: int, inodes: int, mode: int = 0o700) -> None:
    """Mount a fresh tmpfs of at most `size_bytes` and `inodes` files, owned by uid:gid."""
    opts = f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={gid}"
    _mount("b3os-vm", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts)


def unmount(target: Path) -> None:
    """Detach whatever is mounted on `target` (nothing to do when nothing is)."""
    if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise MountError(f"cannot unmount {target}: {os.strerror(err)}")


def mounts_under(prefix: Path) -> list[Path]:
    """Mount points at or under `prefix`, deepest first (the order to unmount them)."""
    found: list[Path] = []
    text = str(prefix).rstrip("/")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == text or point.startswith(text + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (a VM's init outlives bwrap's monitor)."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
