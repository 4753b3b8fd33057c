"""Where the cgroup hierarchies are mounted (`/proc/self/mountinfo`) and where this process sits in them
(`/proc/self/cgroup`), on cgroup v1 or v2: what `node.vm.cgroups` builds the node's groups from, and
`node.vm.stale` looks for a dead node's groups in."""

from __future__ import annotations

from pathlib import Path

V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")


def mounts() -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """(v1 controller -> (mount point, mount root)), and the v2 (mount point, mount root) if mounted."""
    v1: dict[str, tuple[str, str]] = {}
    v2: tuple[str, str] | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, point, fstype = fields[3], fields[4], rfields[0]
        if fstype == "cgroup2" and v2 is None:
            v2 = (point, root)
        elif fstype == "cgroup":
            for opt in rfields[2].split(","):
                if opt in V1_CONTROLLERS and opt not in v1:
                    v1[opt] = (point, root)
    return v1, v2


def hierarchy_points() -> list[str]:
    """Where the memory, cpu, cpuacct and pids v1 hierarchies and the v2 hierarchy are mounted."""
    v1, v2 = mounts()
    return sorted({point for point, _ in v1.values()} | ({v2[0]} if v2 else set()))


def own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            own[ctrl] = parts[2]
    return own


def join(point: str, root: str, path: str) -> Path:
    """The directory of cgroup `path` in the hierarchy mounted at `point` from `root`."""
    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
    return Path(point) / rel.lstrip("/")
