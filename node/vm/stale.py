"""What nodes that died (SIGKILL, a crash, a power cut) left behind, and its removal.

A node names everything it makes by its pid: `<run dir>/node-<pid>/` (its VMs' directories, with their
tmpfs and bind mounts; a microvm driver's is `microvm-<pid>-<hex>/`, with its VMs' sockets) and
`b3os-node-<pid>` cgroups (one per v1 hierarchy, or one v2 group, each with a `vm-*` or `mvm-*` group
per VM). A node removes all of it at a clean stop (SIGTERM). What a dead node left is
removed by the next node that starts on the same run dir (`cleanup_stale`), or by an operator with
`b3os node clean --run-dir DIR` (any run dir, and dead nodes' cgroups wherever they sit). Only what
belongs to a pid with no live process is touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from node.vm import mounts
from node.vm.cgroup_tree import hierarchy_points
from node.vm.cgroups import CallCgroup, CgroupError

_NODE_DIR = re.compile(r"^node-(\d+)$|^microvm-(\d+)-[0-9a-f]+$")  # the sandbox driver's, the microvm's
_NODE_CGROUP = re.compile(r"^b3os-node-(\d+)$")


def _pid(match: re.Match[str]) -> int:
    return int(match.group(1) or match.group(2))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_node_dirs(run_dir: Path) -> list[Path]:
    """The `node-<pid>` (and `microvm-<pid>-<hex>`) directories under `run_dir` whose node is gone."""
    if not run_dir.is_dir():
        return []
    found = []
    for entry in sorted(run_dir.iterdir()):
        match = _NODE_DIR.match(entry.name)
        if match and entry.is_dir() and not pid_alive(_pid(match)):
            found.append(entry)
    return found


def remove_node_dir(path: Path) -> int:
    """Unmount everything under a node's directory (deepest first) and remove it; the mounts undone."""
    points = mounts.mounts_under(path)
    for point in points:
        with contextlib.suppress(mounts.MountError):
            mounts.unmount(point)
    shutil.rmtree(path, ignore_errors=True)
    return len(points)


def dead_node_cgroups(pids: set[int] | None = None) -> list[Path]:
    """`b3os-node-<pid>` cgroups (every hierarchy) of dead nodes; only those of `pids` when given."""
    found: list[Path] = []
    for point in hierarchy_points():
        for top, dirs, _files in os.walk(point):
            keep = []
            for name in dirs:
                match = _NODE_CGROUP.match(name)
                if match is None:
                    keep.append(name)
                    continue
                pid = int(match.group(1))
                if (pids is None or pid in pids) and not pid_alive(pid):
                    found.append(Path(top) / name)
            dirs[:] = keep  # never walk into a node's group
    return found


def remove_cgroup(path: Path) -> None:
    """Remove a dead node's group: its VMs' groups (killing any process left in them) and itself.

    Raises:
        CgroupError: a group could not be removed.
    """
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        CallCgroup(1, {"pids": child}).remove()
    CallCgroup(1, {"pids": path}).remove()


def cleanup_stale(run_dir: Path) -> list[str]:
    """Remove what dead nodes left under `run_dir` and their cgroups; a line for each thing removed."""
    removed = []
    pids: set[int] = set()
    for entry in dead_node_dirs(run_dir):
        count = remove_node_dir(entry)
        match = _NODE_DIR.match(entry.name)
        assert match is not None
        pids.add(_pid(match))
        removed.append(f"{entry} ({count} mounts)")
    if pids:
        removed += clean_cgroups(pids)
    return removed


def clean_cgroups(pids: set[int] | None = None) -> list[str]:
    """Remove the cgroups of dead nodes (of `pids` when given); a line for each group removed."""
    removed = []
    for group in dead_node_cgroups(pids):
        try:
            remove_cgroup(group)
            removed.append(str(group))
        except (CgroupError, OSError) as exc:
            removed.append(f"{group} NOT removed: {exc}")
    return removed
