"""Host mounts the bwrap driver makes (as root): bind mounts and size-limited tmpfs, through libc.

`attach_tree` puts a read-only copy of a tree on a shared mount point with the new mount API (open_tree,
mount_setattr, move_mount): the copy is read-only before it is attached, so the copies the kernel propagates
into a running VM's mount namespace (a slave of that mount point) are read-only there from the first moment.

`overlay` shows a host directory read-only without naming it: a bind mount's root in `/proc/*/mountinfo` is
its path on the host's filesystem, an overlay's is `/`, and its options name its layers by the strings given
at mount time, here `/proc/self/fd/N` (descriptors of the mounting process, closed right after).

Also the one process setting the driver needs: being the child subreaper of its VMs.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

from node.errors import NodeError

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SHARED = 1 << 20
# The new mount API: the same syscall numbers on every architecture but alpha.
NR_OPEN_TREE, NR_MOVE_MOUNT, NR_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0o2000000, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
AT_FDCWD = -100
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class MountError(NodeError):
    """A mount or unmount failed; the message names the path and the reason."""


def _mount(
    source: str, target: Path, fstype: str | None, flags: int, data: str | None, what: str = ""
) -> None:
    res = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if res != 0:
        err = ctypes.get_errno()
        raise MountError(f"cannot mount {what or source} on {target}: {os.strerror(err)}")


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


def shared_tmpfs(target: Path, *, size_bytes: int, inodes: int, mode: int) -> None:
    """Mount a fresh tmpfs (root's, noexec) at `target` as a shared mount of its own peer group: mounts made
    under it later reach its slaves, and none reaches the mount it was made on."""
    tmpfs(target, size_bytes=size_bytes, uid=0, gid=0, inodes=inodes, mode=mode)
    try:
        _mount("none", target, None, MS_PRIVATE, None)
        make_shared(target)
    except MountError:
        unmount(target)
        raise


def make_shared(target: Path) -> None:
    """Make the mount at `target` shared (its own peer group): mounts made on it later reach its slaves."""
    _mount("none", target, None, MS_SHARED, None)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def attach_tree(source: Path, target: Path) -> None:
    """Mount a read-only, nosuid, nodev copy of the tree `source` on `target` (over what is there).

    Raises:
        MountError: a step failed; the message names the step, the paths and the reason.
    """
    _libc.syscall.restype = ctypes.c_long
    fd = _libc.syscall(
        NR_OPEN_TREE, AT_FDCWD, str(source).encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    )
    if fd < 0:
        raise MountError(f"cannot copy the tree {source}: {os.strerror(ctypes.get_errno())}")
    try:
        attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, MS_PRIVATE, 0)
        flags = AT_EMPTY_PATH | AT_RECURSIVE
        if _libc.syscall(NR_MOUNT_SETATTR, fd, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
            raise MountError(f"cannot make {source} read-only: {os.strerror(ctypes.get_errno())}")
        where = str(target).encode()
        if _libc.syscall(NR_MOVE_MOUNT, fd, b"", AT_FDCWD, where, MOVE_MOUNT_F_EMPTY_PATH) != 0:
            raise MountError(f"cannot mount {source} on {target}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def tmpfs(
    target: Path,
    *,
    size_bytes: int,
    uid: int,
    gid: int,
    inodes: int,
    mode: int = 0o700,
    exec_ok: bool = False,
) -> None:
    """Mount a fresh tmpfs of at most `size_bytes` and `inodes` files, owned by uid:gid; noexec by default."""
    opts = f"size={size_bytes},nr_inodes={inodes},mode={mode:o},uid={uid},gid={gid}"
    _mount("b3os-vm", target, "tmpfs", MS_NOSUID | MS_NODEV | (0 if exec_ok else MS_NOEXEC), opts)


def overlay(top: Path, below: Path, target: Path) -> None:
    """Mount `top` over `below` read-only, nosuid, nodev on `target`, as an overlay whose mount info names no
    host path (a file in `top` hides the one of the same path in `below`).

    An overlay without an upper layer needs two lower ones: one may be an empty directory.

    Raises:
        MountError: a directory cannot be opened or the mount failed.
    """
    fds: list[int] = []
    try:
        for path in (top, below):
            fds.append(os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        lower = ":".join(f"/proc/self/fd/{fd}" for fd in fds)
        flags = MS_RDONLY | MS_NOSUID | MS_NODEV
        what = f"an overlay of {top} over {below}"
        _mount("b3os", target, "overlay", flags, f"lowerdir={lower}", what=what)
    except OSError as exc:
        raise MountError(f"cannot open {exc.filename} for an overlay: {exc.strerror}") from exc
    finally:
        for fd in fds:
            os.close(fd)


def unmount(target: Path, *, stacked: int = 1) -> None:
    """Detach what is mounted on `target`, up to `stacked` mounts on top of each other (fewer is fine).

    Raises:
        MountError: an unmount failed for another reason than "nothing (more) is mounted there".
    """
    for _ in range(stacked):
        if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
                raise MountError(f"cannot unmount {target}: {os.strerror(err)}")
            return


def mounts_under(prefix: Path) -> list[Path]:
    """Mount points at or under `prefix`, deepest first (the order to unmount them)."""
    found: list[Path] = []
    text = str(prefix).rstrip("/")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == text or point.startswith(text + "/"):
            found.append(Path(point))
    # A point with mounts stacked on it is listed once per mount, so each unmount takes one of them.
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (a VM's init outlives bwrap's monitor)."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def remove_tree(path: Path) -> None:
    """Unmount whatever is mounted at or under `path`, then remove it, whatever is left in it."""
    for point in mounts_under(path):
        with contextlib.suppress(MountError):
            unmount(point)
    shutil.rmtree(path, ignore_errors=True)
