"""What a VM's sandbox is made of: its size (`VmLimits`), the root the node lays out for every VM
(`make_root`) and bwrap's options for one VM (`bwrap_args`).

The root is the base template read-only, under a layer of the node's own files (`OVER`: no host resolver
or addresses); beside it an empty file on a tmpfs of its own, what a VM reads as the kernel's command line
(the mount table then names no host path). In the sandbox the VM's init (bwrap's pid 1, the VM user's too)
is hidden under a read-only tmpfs over `/proc/1`: its memory and its descriptors (the node's status pipe)
are not the tool's to write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from node.vm import mounts
from node.vm.bwrap_vm import make_dir

SANDBOX_UID = 1000
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

OVER = {
    "etc/resolv.conf": "# a VM has no network, so no resolver\n",
    "etc/hosts": "127.0.0.1 localhost\n127.0.1.1 vm\n",
}
"""The node's files over the base in every VM: none names the host's resolver or addresses."""


@dataclass(frozen=True)
class VmLimits:
    """The size of one VM."""

    memory_mb: int = 512
    vcpu: int = 1
    pids_max: int = 64
    work_mb: int = 64
    tmp_mb: int = 16
    shm_mb: int = 16
    out_kb: int = 1024
    in_kb: int = 2048


def make_root(node_dir: Path, base_rootfs: Path) -> None:
    """Lay out `node_dir/base` (the VMs' root: `OVER` over the base template, read-only) and
    `node_dir/blank/cmdline` (an empty file on a read-only tmpfs).

    Raises:
        mounts.MountError: a mount failed.
    """
    over, blank = node_dir / "over", node_dir / "blank"
    for path in (over, blank):
        make_dir(path, 0o755)
    for name, text in OVER.items():
        path = over / name
        path.parent.mkdir(mode=0o755, exist_ok=True)
        path.write_text(text)
        os.chmod(path, 0o644)
    mounts.tmpfs(blank, size_bytes=4096, uid=0, gid=0, inodes=4, mode=0o755)
    (blank / "cmdline").touch(mode=0o444)
    mounts.bind(blank, blank, read_only=True)
    mounts.overlay(over, base_rootfs, node_dir / "base")


def bwrap_args(
    node_dir: Path, vm_dir: Path, lim: VmLimits, status_fd: int, block_fd: int, seccomp_fd: int
) -> list[str]:
    """bwrap's options for the VM of `vm_dir` (the node gives them through `--args`, so that `ps` does not
    show them)."""
    return [
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "vm",
        "--ro-bind", str(node_dir / "base"), "/",
        "--ro-bind", str(vm_dir / "tool"), "/tool",
        "--ro-bind", str(vm_dir / "in"), "/in",
        "--bind", str(vm_dir / "out"), "/out",
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "0555", "--size", "4096", "--tmpfs", "/proc/1", "--remount-ro", "/proc/1",
        "--ro-bind", str(node_dir / "blank" / "cmdline"), "/proc/cmdline",
        "--size", str(lim.shm_mb << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", str(lim.work_mb << 20), "--tmpfs", "/work",
        "--size", str(lim.tmp_mb << 20), "--tmpfs", "/tmp",
        "--chdir", "/work", "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8",
        "--json-status-fd", str(status_fd), "--block-fd", str(block_fd), "--seccomp", str(seccomp_fd),
    ]  # fmt: skip
