"""The default VM driver: bubblewrap namespaces plus a per-call cgroup.

A VM here is a bubblewrap sandbox with new user, pid, net, ipc, uts, mount (and cgroup) namespaces and no
further user namespaces inside. Its root is the base template, read-only; `/tool` is the tool's unpacked
tree, read-only; `/in` holds the input files, read-only; `/out` is a fresh host tmpfs (size-limited, read back
by the node after the command); `/work`, `/tmp` and `/dev/shm` are fresh size-limited tmpfs; the rest of
`/dev` (bwrap's few device nodes) is read-only. The command runs without a shell, in `/work`, as uid 1000
inside, with only `PATH`, `HOME=/work` and `LANG=C.UTF-8` in its environment, under the seccomp filter of
`node/vm/seccomp.py`. The net namespace is empty (a loopback of its own, no route to the host).

Each VM runs as a host uid and gid of its own (`node/vm/uids.py`: `uid_base` up, one per VM alive at once,
never root), so per-uid kernel quotas and file permissions keep VMs apart from each other and from the
host's users. A VM's directory is 0700 and owned by its uid; its input files are root's, mode 0640, in its
gid. bwrap gets its options through a pipe (`--args`), so `ps` shows no VM path, and the base template and
the tool's tree are overlays named by descriptors (`mounts.overlay`), so the sandbox's mount table names no
host path either.

Each VM gets its own cgroup (memory with swap, CFS CPU quota, pids) under the node's own cgroup. bwrap joins
it before it starts (the launcher's `--as` mode), so every process of the VM is in the group from its first
instruction and the VM's cgroup namespace is rooted at the group. What the sandbox is made of (its root,
bwrap's options) is `node/vm/sandbox.py`.

The pool starts VMs ahead of calls: a prepared VM is its directory (`node/vm/bwrap_dirs.py`), its cgroup
with limits, and its bwrap with the namespaces and mounts made, running the launcher (`launcher.c`) as
`/tool/launch`, which waits for the command. On claim the node writes the input files to `in/` (the same
tmpfs the sandbox sees at /in), mounts the installed tool tree read-only over `tool/` (the mount
propagates into the sandbox's /tool, a slave of it, and hides the launcher), and hands the command to the
launcher, which execve()s it without a shell. Once the command has exited (its status from the kernel) the
call answers; every process of the VM is then killed at once and its mounts, cgroup and directory are
removed by a background thread (before the output files are read, when the answer names some, the
processes are killed on the call's path). A VM is still used for one call only. `FILLERS` threads refill
the pool, counting a claimed VM as the pool's until it is handed over (claim to its tool's mount): the
kernel makes mounts one at a time, and the tool's waited for a filler's (0.75 ms in half of the calls).

bwrap is spawned (with vfork) through the launcher (`node/vm/bwrap_spawn.py`) in the node's own small mount
namespace. The node's directory is a shared mount, so the VMs' mounts made under it later reach that
namespace and the sandboxes.

How the command ended comes from the kernel (`node/vm/exits.py`): the command's own exit status, through a
pidfd the node opened on it before the call, whatever the sandbox's init does. On kernels before 6.15 it
comes from bwrap's `--json-status-fd` `exit-code` record, where a command killed by signal N is exit status
128+N (like a shell), so there exit statuses 129..192 are read as signals.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import stat
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

from node.vm import mounts, sandbox
from node.vm.base import Vm, VmDriver, VmError
from node.vm.bwrap_dirs import make_node_dir, make_vm_dir, remove_vm_dir
from node.vm.bwrap_spawn import spawn
from node.vm.bwrap_vm import SETUP_S, BwrapVm, SetupError, make_dir
from node.vm.cgroups import CgroupError, CgroupLimits, NodeCgroups
from node.vm.holder import hold_namespace, stop_holder
from node.vm.host_share import HostShare
from node.vm.launcher import NAME as LAUNCHER_NAME
from node.vm.launcher import LauncherError, build_launcher
from node.vm.sandbox import VmLimits
from node.vm.seccomp import FilterError, build_filter
from node.vm.stale import cleanup_stale
from node.vm.uids import UidPool
from telemetry.threads import name_os_thread

log = logging.getLogger("b3os.node.vm")

UID_BASE = 1_900_000_000  # the first host uid of the VMs (B3OS_VM_UID_BASE; see node/vm/uids.py)
FILLERS = 2  # VMs prepared at once in the background
MAX_REMOVING = 16  # used VMs the remover is behind with (their left processes, mounts and cgroup)


class BwrapDriver(VmDriver):
    """Hands out bubblewrap VMs from a pool started ahead of calls (bounded, refilled in the background)."""

    name = "bwrap"

    def __init__(
        self,
        *,
        base_rootfs: Path,
        run_dir: Path,
        limits: VmLimits | None = None,
        pool_size: int = 2,
        slots: int = 8,
        uid_base: int = UID_BASE,
        host_share: HostShare = HostShare(),  # noqa: B008 (frozen)
    ) -> None:
        """Set up the node's directory, mounts, launcher and cgroup, and start filling the pool.

        Args:
            slots: calls at once (the runner's slots): with `pool_size` and `MAX_REMOVING`, how many VMs can
                be alive at once, so how many host uids from `uid_base` up the VMs use.
            host_share: the VMs' weight and cap against the rest of the host.

        Raises:
            VmError: reason "no_slot" when bwrap, the base template, a C compiler, cgroups or the uid range
                are not usable.
        """
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise VmError(
                "no_slot", "bubblewrap is not installed (Debian package `bubblewrap`; `make setup`)"
            )
        if not (base_rootfs / "usr").is_dir():
            raise VmError("no_slot", f"no base template at {base_rootfs}: run `b3os node build-base`")
        self.uids = UidPool(uid_base, slots + pool_size + MAX_REMOVING)  # a VM keeps its uid until removed
        try:
            self._seccomp = build_filter()
        except FilterError as exc:
            raise VmError("no_slot", str(exc)) from exc
        mounts.become_subreaper()
        self.bwrap = bwrap
        self.limits = limits or VmLimits()
        self.pool_size = pool_size
        self.run_dir = run_dir
        self.node_dir = run_dir / f"node-{os.getpid()}"
        self._cg_limits = CgroupLimits(self.limits.memory_mb << 20, self.limits.vcpu, self.limits.pids_max)
        self._pool: deque[BwrapVm] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._preparing = 0
        self._removing: deque[BwrapVm] = deque()
        self._remover_busy = False
        self._handing_over: set[str] = set()  # claimed VMs whose tool is not mounted yet: still the pool's
        run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(run_dir, 0o711)
        closed = [str(p) for p in run_dir.parents if not p.stat().st_mode & stat.S_IXOTH]
        if closed:
            raise VmError("no_slot", f"the VM's user cannot reach {run_dir}: {closed[0]} is not searchable")
        for line in cleanup_stale(run_dir):
            log.warning("removed what a dead node left: %s", line)
        make_dir(self.node_dir, 0o711)
        self._holder: subprocess.Popen[bytes] | None = None
        self._ns_fd = -1
        try:
            make_node_dir(self.node_dir)
            # a tmpfs of its own (its mount info names no host path), executable even where the run dir's
            # filesystem is mounted noexec (/run), then read-only
            launcher_dir = self.node_dir / "launcher"
            mounts.tmpfs(launcher_dir, size_bytes=8 << 20, uid=0, gid=0, inodes=16, mode=0o755, exec_ok=True)
            self.launcher_dir = build_launcher(launcher_dir)
            mounts.bind(self.launcher_dir, self.launcher_dir, read_only=True)
            sandbox.make_root(self.node_dir, base_rootfs)
            self.cgroups = NodeCgroups.open(f"b3os-node-{os.getpid()}")
            try:
                cap = host_share.cap_cpus(self.cgroups.cpus_above())
            except ValueError as exc:
                if not self.cgroups.children():  # this node's alone (a test process may hold another driver)
                    self.cgroups.remove()
                raise SetupError(str(exc)) from exc
            try:
                self.cgroups.weigh(host_share.weight, cap)
            except CgroupError as exc:
                log.warning("the VMs keep the host's default CPU weight, without a cap: %s", exc)
            self._hold_namespace()
        except (mounts.MountError, CgroupError, LauncherError, SetupError) as exc:
            self._stop_holder()
            mounts.remove_tree(self.node_dir)
            raise VmError("no_slot", f"the bwrap driver cannot start: {exc}") from exc
        self._fillers = [
            threading.Thread(target=self._fill, name=f"b3os-vm-pool-{i}", daemon=True)
            for i in range(min(FILLERS, pool_size))
        ]
        self._remover = threading.Thread(target=self._remove_loop, name="b3os-vm-remover", daemon=True)
        for thread in (*self._fillers, self._remover):
            thread.start()

    def _hold_namespace(self) -> None:
        """Start the process that holds the small mount namespace VMs are spawned in (node.vm.holder).

        Raises:
            SetupError: the namespace could not be made.
        """
        self._holder, self._ns_fd = hold_namespace(self.launcher_dir / LAUNCHER_NAME, self.node_dir)

    def _stop_holder(self) -> None:
        stop_holder(self._holder, self._ns_fd)
        self._holder, self._ns_fd = None, -1

    def bwrap_args(self, vm_dir: Path, status_fd: int, block_fd: int, seccomp_fd: int) -> list[str]:
        """bwrap's options for one VM (given to it through `--args`, so that `ps` does not show them)."""
        return sandbox.bwrap_args(self.node_dir, vm_dir, self.limits, status_fd, block_fd, seccomp_fd)

    def pool_ready(self) -> int:
        """VMs prepared ahead and waiting for a call."""
        return len(self._pool)  # a deque's len needs no lock

    def pool_target(self) -> int:
        """How many VMs the pool keeps prepared."""
        return self.pool_size

    def claim(self, deadline: float) -> Vm:
        vm: BwrapVm | None = None
        while vm is None:
            with self._cond:
                if self._closed:
                    raise VmError("no_slot", "the node is shutting down")
                if not self._pool:
                    break
                vm = self._pool.popleft()
                self._handing_over.add(vm.id)  # its place is not free until it is handed over
                self._cond.notify_all()
            if not vm.alive():  # killed while it waited (the OOM killer, an operator): take the next one
                log.warning("VM %s died in the pool", vm.id)
                vm.delete()
                vm = None
        if vm is None:
            if time.monotonic() >= deadline:
                raise VmError("no_slot", "the call's time ran out before a VM was free")
            try:
                vm = self._prepare()
            except (OSError, mounts.MountError, CgroupError, SetupError) as exc:
                log.warning("no VM could be prepared: %s", exc)
                raise VmError("no_slot", "no VM could be prepared on this node") from exc
            with self._cond:
                self._handing_over.add(vm.id)
        return vm

    def handed_over(self, vm: BwrapVm) -> None:
        """The VM's tool is mounted (or the VM is deleted first): its place in the pool is free."""
        with self._cond:
            if vm.id in self._handing_over:
                self._handing_over.discard(vm.id)
                self._cond.notify_all()

    def _prepare(self) -> BwrapVm:
        """A VM whose sandbox is up and whose launcher waits for a command.

        Raises:
            SetupError: every VM uid is in use, or the sandbox did not come up.
        """
        with self._cond:
            uid = self.uids.take()
        if uid is None:
            raise SetupError(f"all {self.uids.count} VM uids are in use")
        vm_id = f"vm-{secrets.token_hex(6)}"
        path = self.node_dir / vm_id
        vm: BwrapVm | None = None
        try:
            make_vm_dir(path, uid, self.limits, self.launcher_dir)
            vm = BwrapVm(self, vm_id, path, self.cgroups.create_call(vm_id, self._cg_limits), uid)
            spawn(
                vm,
                bwrap=self.bwrap,
                launcher=self.launcher_dir / LAUNCHER_NAME,
                ns_fd=self._ns_fd,
                seccomp=self._seccomp,
                options=functools.partial(self.bwrap_args, vm.path),
            )
        except BaseException:
            if vm is not None:
                self.destroy(vm)
            else:
                remove_vm_dir(path)
                self._give_uid(uid)
            raise
        return vm

    def _give_uid(self, uid: int) -> None:
        with self._cond:
            self.uids.give(uid)
            self._cond.notify_all()

    def _fill(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while not self._closed and (
                    len(self._pool) + self._preparing + len(self._handing_over) >= self.pool_size
                    or not self.uids.free
                ):
                    self._cond.wait()
                if self._closed:
                    return
                self._preparing += 1
            try:
                vm = self._prepare()
            except (OSError, mounts.MountError, CgroupError, SetupError) as exc:
                log.warning("preparing a VM failed: %s", exc)
                with self._cond:
                    self._preparing -= 1
                    self._cond.notify_all()
                time.sleep(0.5)
                continue
            with self._cond:
                self._preparing -= 1
                self._cond.notify_all()
                if not self._closed:
                    self._pool.append(vm)
                    continue
            self.destroy(vm)
            return

    def settle(self, timeout_s: float = 5.0) -> list[str]:
        """Wait until the pool is full and idle and every used VM is removed; return the prepared VMs' ids."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while time.monotonic() < end and (
                len(self._pool) < self.pool_size or self._preparing or self._removing or self._remover_busy
            ):
                self._cond.wait(0.01)
            return [vm.id for vm in self._pool]

    def pool_pids(self) -> set[int]:
        """The processes of the prepared VMs (their bwrap and their cgroups' processes), for leak checks."""
        with self._cond:
            pool = list(self._pool)
        found: set[int] = set()
        for vm in pool:
            if vm.proc is not None:
                found.add(vm.proc.pid)
            found.update(vm.cgroup.pids())
        return found

    def destroy(self, vm: BwrapVm, *, wait: bool = True) -> None:
        """Kill the VM's processes, then remove its cgroup, unmount and remove its directory.

        With `wait` False that is left to the remover thread, unless it is already behind: a call's answer
        does not wait for it. The VM's processes left after its command (a daemon the tool started) then
        live until the remover kills them, in the VM's cgroup and namespaces, with its uid still taken.
        """
        if not wait:
            with self._cond:
                if not self._closed and len(self._removing) < MAX_REMOVING:
                    self._removing.append(vm)
                    self._cond.notify_all()
                    return
        self._remove(vm)

    def _remove_loop(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while not self._closed and not self._removing:
                    self._cond.wait()
                if not self._removing:
                    return
                vm = self._removing.popleft()
                self._remover_busy = True
            try:
                self._remove(vm)
            finally:
                with self._cond:
                    self._remover_busy = False
                    self._cond.notify_all()

    def _remove(self, vm: BwrapVm) -> None:
        try:
            vm._stop()
        finally:
            vm.close_fds()
        self._give_uid(vm.uid)  # no process of the VM is left
        try:
            vm.cgroup.remove()
        except CgroupError as exc:
            log.warning("VM %s: %s", vm.id, exc)
        remove_vm_dir(vm.path)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            pool = list(self._pool)
            self._pool.clear()
            self._cond.notify_all()
        for thread in (*self._fillers, self._remover):
            thread.join(timeout=SETUP_S)
        for vm in pool:
            vm.delete()
        with contextlib.suppress(CgroupError):
            self.cgroups.remove()
        self._stop_holder()
        mounts.remove_tree(self.node_dir)
        self.uids.close()
