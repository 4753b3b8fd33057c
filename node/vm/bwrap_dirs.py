"""The bubblewrap driver's directories on the host (`node.vm.bwrap`): the node's, and each VM's, made and
removed.

`<run dir>/node-<pid>/` is a tmpfs of its own, so each VM's directories are made and removed in memory
whatever the run dir's filesystem (on ext4 that took ~0.4 ms of the node's CPU a VM), and a shared mount,
so that what is mounted under it later reaches the namespace the VMs are spawned in (a slave).

`<node dir>/<vm id>/`, 0700 and the VM uid's, holds three mount points the sandbox sees:
- `in/`: a tmpfs of `in_kb`, root's files in the VM's gid (0750), the call's input files;
- `out/`: a tmpfs of `out_kb`, the VM uid's, what the tool writes for the node to read back;
- `tool/`: the launcher's directory bound read-only and made a shared mount, so that the call's tree,
  mounted over it at claim, reaches the sandbox's `/tool` (its slave) and hides the launcher.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from node.vm import mounts
from node.vm.bwrap_vm import make_dir
from node.vm.sandbox import VmLimits

log = logging.getLogger("b3os.node.vm")

NODE_DIR_BYTES = 1 << 20  # the node's directory holds directories and two small files; mounts hold the rest
NODE_DIR_INODES = 4096  # about 4 a VM directory, and at most slots + pool size + bwrap.MAX_REMOVING


def make_node_dir(path: Path) -> None:
    """Mount the node's directory (made, 0711) and make the directories the driver mounts on.

    Raises:
        OSError, mounts.MountError: a directory or the mount could not be made.
    """
    mounts.shared_tmpfs(path, size_bytes=NODE_DIR_BYTES, inodes=NODE_DIR_INODES, mode=0o711)
    for sub in ("base", "nsroot", "launcher", "empty"):
        make_dir(path / sub, 0o755)


def make_vm_dir(path: Path, uid: int, limits: VmLimits, launcher_dir: Path) -> None:
    """Make the VM's directory and its three mounts.

    Raises:
        OSError, mounts.MountError: a directory or a mount could not be made (remove it with
            `remove_vm_dir`).
    """
    make_dir(path, 0o700)
    os.chown(path, uid, uid)
    for sub in ("in", "tool", "out"):
        make_dir(path / sub, 0o755)
    mounts.tmpfs(path / "in", size_bytes=limits.in_kb << 10, uid=0, gid=uid, inodes=64, mode=0o750)
    mounts.tmpfs(path / "out", size_bytes=limits.out_kb << 10, uid=uid, gid=uid, inodes=256)
    mounts.attach_tree(launcher_dir, path / "tool")
    mounts.make_shared(path / "tool")


def remove_vm_dir(path: Path) -> None:
    """Unmount and remove what `make_vm_dir` made, and the call's tree mounted over `tool/`."""
    for sub, stacked in (("in", 1), ("out", 1), ("tool", 2)):
        try:
            mounts.unmount(path / sub, stacked=stacked)
        except mounts.MountError as exc:
            log.warning("%s", exc)
    try:  # the usual case: only the three empty mount points are left
        for sub in ("in", "tool", "out"):
            os.rmdir(path / sub)
        os.rmdir(path)
    except OSError:
        mounts.remove_tree(path)
