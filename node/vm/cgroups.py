"""Per-call cgroups nested under the node's own cgroup, on cgroup v1 or v2.

`NodeCgroups.open(name)` finds where this process sits (`/proc/self/cgroup`) and where each hierarchy is
mounted (`/proc/self/mountinfo`), and makes the node's group `<own>/<name>` (per controller on v1, one group
on v2). `NodeCgroups.create_call(id, limits)` makes `<own>/<name>/<id>` with the VM's limits:

- memory: v1 `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes` (swap included) ; v2 `memory.max` and
  `memory.swap.max = 0`;
- CPU: a CFS quota of `vcpu * period` (v1 `cpu.cfs_quota_us`, v2 `cpu.max`);
- processes: `pids.max`.

`CallCgroup.set_cpu_share(fraction)` weighs a VM against the node's other VMs when the CPU is contended
(v1 `cpu.shares` of 1024, v2 `cpu.weight` of 100, times the fraction): the runner gives the VMs of one
tenant a whole VM's weight between them. `NodeCgroups.weigh(times, cpus)` weighs the node's VMs together
against the host's other work (`times` a group at its default: a process session, another service) and
caps them together at `cpus` (a CFS quota on the node's group).

CPU used is read from `cpuacct.usage` (v1, ns) or `cpu.stat` `usage_usec` (v2); memory from
`memory.usage_in_bytes` / `memory.current` and the peak from `memory.max_usage_in_bytes` / `memory.peak`.

v2 has the "no internal processes" rule: when the node's own group holds processes and its controllers are not
yet delegated to children, those processes are moved into a `<own>/b3os-leaf` group first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from node.errors import NodeError
from node.vm.cgroup_tree import V1_CONTROLLERS, join, mounts, own_paths
from node.vm.kill import kill_and_wait

V2_CONTROLLERS = ("memory", "cpu", "pids")
CFS_PERIOD_US = 100_000
FULL_SHARE = {1: ("cpu.shares", 1024, 2, 262_144), 2: ("cpu.weight", 100, 1, 10_000)}
"""cgroup version -> the weight's file, a whole VM's weight (the default of a group), the least, the most."""


class CgroupError(NodeError):
    """A cgroup could not be found, made, limited or removed; the message names the file."""


@dataclass(frozen=True)
class CgroupLimits:
    """The limits of one VM."""

    memory_bytes: int
    vcpu: float
    pids_max: int


def _write(path: Path, value: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # three system calls (see `_read`)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def _read(path: Path) -> str:
    """A cgroup file's text in four system calls where `Path.read_text` makes nine, each a turn of the
    interpreter's lock that the node's other threads may take (these are read on every call's path).
    Read to the end of the file: a kernel file may answer a read with less than it holds."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _read_int(path: Path) -> int:
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _set_share(version: int, cpu_dir: Path, times: float) -> None:
    name, full, least, most = FULL_SHARE[version]
    _write(cpu_dir / name, str(min(most, max(least, round(full * times)))))


def _set_quota(version: int, cpu_dir: Path, cpus: float | None) -> None:
    """Let a group use at most `cpus` CPUs (a CFS quota per `CFS_PERIOD_US`); None: no cap."""
    quota = -1 if cpus is None else max(1000, round(CFS_PERIOD_US * cpus))
    if version == 1:
        _write(cpu_dir / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(cpu_dir / "cpu.cfs_quota_us", str(quota))
    else:
        _write(cpu_dir / "cpu.max", f"{'max' if quota < 0 else quota} {CFS_PERIOD_US}")


def _cpu_max(group: Path) -> tuple[int, int]:
    """A v2 group's CPU quota and period (`cpu.max`); (0, 0) when it has none."""
    try:
        text = (group / "cpu.max").read_text().split()
    except OSError:
        return 0, 0
    if len(text) != 2 or text[0] == "max":
        return 0, 0
    return int(text[0]), int(text[1])


def _rmdir(path: Path, tries: int = 50) -> None:
    for _ in range(tries):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise CgroupError(f"cannot remove {path}: {exc.strerror}") from exc
            time.sleep(0.002)
    raise CgroupError(f"cannot remove {path}: still busy")


class CallCgroup:
    """The cgroup(s) of one VM: put processes in, read usage, kill all, remove."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self._share = 1.0  # a new group weighs a whole VM (FULL_SHARE: the kernel's default)

    @property
    def paths(self) -> list[Path]:
        """Every directory of this group (one per controller on v1)."""
        return list(dict.fromkeys(self.dirs.values()))

    def add(self, pid: int) -> None:
        """Move `pid` into the group (children it forks later inherit it)."""
        for path in self.paths:
            _write(path / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """The processes now in the group.

        One hierarchy is enough on v1: the VM's init is put in every one, its descendants inherit them all,
        and only root can move a process.
        """
        with contextlib.suppress(OSError):
            return sorted(int(p) for p in _read(self.dirs["pids"] / "cgroup.procs").split())
        return []

    def cpu_ns(self) -> int:
        """CPU time used by the group so far, in nanoseconds."""
        if self.version == 1:
            return _read_int(self.dirs["cpuacct"] / "cpuacct.usage")
        with contextlib.suppress(OSError):
            for line in _read(self.dirs["cpu"] / "cpu.stat").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
        return 0

    def set_cpu_share(self, fraction: float) -> None:
        """Weigh the group's CPU at `fraction` of a whole VM's when the node's CPU is contended (written only
        when it changes: a tenant's lone VM keeps its group's default)."""
        if fraction != self._share:
            _set_share(self.version, self.dirs["cpu"], fraction)
            self._share = fraction

    def memory_bytes(self) -> int:
        """Memory the group uses now."""
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return _read_int(self.dirs["memory"] / name)

    def memory_peak(self) -> int:
        """The most memory the group used (0 when the kernel does not say)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        return _read_int(self.dirs["memory"] / name)

    def reset_peak(self) -> None:
        """Start the peak memory afresh from the usage now (v1 only: v2's memory.peak resets per reader)."""
        if self.version == 1:
            with contextlib.suppress(CgroupError):
                _write(self.dirs["memory"] / "memory.max_usage_in_bytes", "0")

    def oom_kills(self) -> int:
        """How many processes of the group the kernel killed for memory."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError):
            for line in _read(self.dirs["memory"] / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def kill(self, timeout_s: float = 2.0) -> bool:
        """SIGKILL every process of the group until it is empty; True when it emptied in time."""
        if self.version == 2 and (self.dirs["memory"] / "cgroup.kill").exists():
            with contextlib.suppress(CgroupError):
                _write(self.dirs["memory"] / "cgroup.kill", "1")
        end = time.monotonic() + timeout_s
        before: list[int] = []
        while True:
            pids = self.pids()
            if not pids:
                return True
            if pids == before:  # still listed though they ended (a zombie's parent dying): no busy loop
                time.sleep(0.001)
            before = pids
            kill_and_wait(pids, end)
            if time.monotonic() > end:
                return not self.pids()

    def remove(self) -> None:
        """Kill what is left and remove the group's directories."""
        self.kill()
        for path in self.paths:
            _rmdir(path)


class NodeCgroups:
    """The node's own group, under which every VM gets its own group."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self.cap: float | None = None  # the most CPUs the VMs together may use (`weigh`), None: none

    @classmethod
    def open(cls, name: str) -> NodeCgroups:
        """Make (or reuse) `<own cgroup>/<name>`; v2 when the unified hierarchy has the controllers, else v1.

        Raises:
            CgroupError: neither hierarchy has the memory, cpu and pids controllers where this process sits.
        """
        v1, v2 = mounts()
        own = own_paths()
        if v2 is not None and "" in own:
            unified = join(v2[0], v2[1], own[""])
            root_ctrls = Path(v2[0], "cgroup.controllers")
            with contextlib.suppress(OSError):
                if set(V2_CONTROLLERS) <= set(root_ctrls.read_text().split()):
                    node = cls._open_v2(unified, name)
                    return cls(2, dict.fromkeys(V2_CONTROLLERS, node))
        missing = [c for c in V1_CONTROLLERS if c not in v1 or c not in own]
        if missing:
            raise CgroupError(
                f"no cgroup v1 or v2 hierarchy with the {', '.join(missing)} controller(s) here"
            )
        dirs: dict[str, Path] = {}
        for ctrl in V1_CONTROLLERS:
            point, root = v1[ctrl]
            dirs[ctrl] = join(point, root, own[ctrl]) / name
            dirs[ctrl].mkdir(exist_ok=True)
        if _read_int(dirs["memory"] / "memory.use_hierarchy") == 0:
            _write(dirs["memory"] / "memory.use_hierarchy", "1")
        return cls(1, dirs)

    @staticmethod
    def _open_v2(own: Path, name: str) -> Path:
        wanted = " ".join(f"+{c}" for c in V2_CONTROLLERS)
        try:
            _write(own / "cgroup.subtree_control", wanted)
        except CgroupError:
            # Processes sit in our own group: move them into a leaf, then delegate the controllers.
            leaf = own / "b3os-leaf"
            leaf.mkdir(exist_ok=True)
            for pid in (own / "cgroup.procs").read_text().split():
                with contextlib.suppress(CgroupError):
                    _write(leaf / "cgroup.procs", pid)
            _write(own / "cgroup.subtree_control", wanted)
        node = own / name
        node.mkdir(exist_ok=True)
        _write(node / "cgroup.subtree_control", wanted)
        return node

    def cpus_above(self) -> float | None:
        """The fewest CPUs a quota of a group above the node's allows (a container's `--cpus`), None: none.

        A group's quota may not exceed its parent's on v1 (the kernel refuses it), and on v2 the smaller
        one applies anyway."""
        quotas = []
        for group in self.dirs["cpu"].parents:
            if self.version == 1:
                quota, period = _read_int(group / "cpu.cfs_quota_us"), _read_int(group / "cpu.cfs_period_us")
            else:
                quota, period = _cpu_max(group)
            if quota > 0 and period > 0:
                quotas.append(quota / period)
            if group.is_mount():  # the hierarchy's root
                break
        return min(quotas, default=None)

    def weigh(self, times: float, cpus: float | None) -> None:
        """Cap the node's VMs together at `cpus` CPUs (None: no cap), then weigh them at `times` a group at
        its default when the host's CPU is contended. The weight is left at the default when the cap cannot
        be set: a weight without it could let the tools take the node's own process's CPU.

        Raises:
            CgroupError: the cap or the weight could not be written (the message names the file).
        """
        _set_quota(self.version, self.dirs["cpu"], cpus)
        self.cap = cpus
        _set_share(self.version, self.dirs["cpu"], times)

    def cpu_ns(self) -> int:
        """CPU time used by all the node's VMs so far, in nanoseconds."""
        return CallCgroup(self.version, self.dirs).cpu_ns()

    def create_call(self, call: str, limits: CgroupLimits) -> CallCgroup:
        """Make the group of one VM with its limits set."""
        dirs = {ctrl: path / call for ctrl, path in self.dirs.items()}
        group = CallCgroup(self.version, dirs)
        try:
            for path in group.paths:
                path.mkdir()
            if self.version == 1:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
                if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                    _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            else:
                _write(dirs["memory"] / "memory.max", str(limits.memory_bytes))
                with contextlib.suppress(CgroupError):
                    _write(dirs["memory"] / "memory.swap.max", "0")
            # a VM has at most the VMs' cap (on v1 the kernel refuses a quota above its parent's)
            _set_quota(self.version, dirs["cpu"], min(limits.vcpu, self.cap or limits.vcpu))
            _write(dirs["pids"] / "pids.max", str(limits.pids_max))
        except (OSError, CgroupError) as exc:
            with contextlib.suppress(CgroupError):
                group.remove()
            raise CgroupError(f"cannot make the VM's cgroup {call}: {exc}") from exc
        return group

    def children(self) -> list[str]:
        """Names of the call groups now under the node's group."""
        names: set[str] = set()
        for path in set(self.dirs.values()):
            with contextlib.suppress(OSError):
                names.update(p.name for p in path.iterdir() if p.is_dir())
        return sorted(names)

    def remove(self) -> None:
        """Remove every call group left and the node's group itself."""
        for name in self.children():
            CallCgroup(self.version, {c: p / name for c, p in self.dirs.items()}).remove()
        for path in set(self.dirs.values()):
            with contextlib.suppress(CgroupError):
                _rmdir(path)
