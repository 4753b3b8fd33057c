"""The microvm driver: each call in a fresh QEMU `microvm` guest with its own kernel, deleted after the call.

A VM is `qemu-system-x86_64 -M microvm` with 1 vCPU, 512 MiB, `-nodefaults -no-user-config`, no network
device, no disk: the guest (`b3os node build-guest`, `node/vm/guest.py`) boots a Debian cloud kernel with
an initramfs holding the base template's runtime and a small init (`node/vm/guest_init.py`). The tool, the
input files, the request and the answer travel over one virtio-serial port whose host end is a unix
socket in the VM's directory: a serial port needs no network device and no vhost module on the host (as
vsock would), and unlike a disk image it can carry the call to a VM booted before the call (the pool).

QEMU runs confined as the sandbox driver's processes are: as a host uid of its own (`node/vm/uids.py`), in
a cgroup of its own under the node's (memory: the guest's plus `QEMU_OVERHEAD_MB`, the VM's CPU quota,
pids), started through the launcher's `--as` mode (it joins the cgroup and drops every group and id
before QEMU's first instruction), with QEMU's own seccomp filter (`-sandbox on`, spawning, privilege and
resource changes denied). QEMU reads the kernel and the initramfs through descriptors the node opened
(`/proc/self/fd/N`): the VM's uid reaches no file of the node.

KVM is used when a boot probe at start succeeds (`B3OS_MICROVM_ACCEL=auto`; `kvm` or `tcg` forces one):
`/dev/kvm` must be open to a group (the usual `kvm` group, mode 0660), which QEMU then runs as, and a
guest must boot on it in `PROBE_S`; otherwise TCG (QEMU's emulator). `accel` and `accel_reason` say
which and why; the node reports them at start and in its heartbeat.

A pool of booted VMs (`pool_size`) is refilled by `FILLERS` background threads; a call takes one (its
`start` phase is then the hand-over, not the boot), and when the pool is empty the call boots its own.
Each VM still serves exactly one call and is then killed and removed (QEMU, its cgroup, its directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from cachetools import LRUCache

from node.vm import mounts
from node.vm.base import Vm, VmDriver, VmError
from node.vm.bwrap_vm import make_dir
from node.vm.cgroups import CgroupError, CgroupLimits, NodeCgroups
from node.vm.guest import Guest
from node.vm.host_share import HostShare
from node.vm.launcher import NAME as LAUNCHER_NAME
from node.vm.launcher import LauncherError, build_launcher
from node.vm.microvm_vm import ChannelClosed, MicroVm, tree_entries
from node.vm.qemu import kvm_group, qemu_argv
from node.vm.sandbox import VmLimits
from node.vm.stale import cleanup_stale
from node.vm.uids import UidPool
from telemetry.threads import name_os_thread

log = logging.getLogger("b3os.node.vm")

QEMU = "qemu-system-x86_64"
ACCELS = ("auto", "kvm", "tcg")
FILLERS = 1  # VMs booted at once in the background (a TCG boot takes a core for seconds)
BOOT_S = 60.0  # how long a guest may take to boot (TCG on a busy host)
PROBE_S = 10.0  # how long the KVM probe's guest may take (KVM boots in well under a second)
QEMU_OVERHEAD_MB = 256  # QEMU's own memory beside the guest's (its 64 MiB of translated code under TCG)
QEMU_PIDS = 64


class MicroVmDriver(VmDriver):
    """Hands out booted microVMs from a pool (bounded, refilled in the background)."""

    name = "microvm"

    def __init__(
        self,
        *,
        guest: Guest,
        run_dir: Path,
        limits: VmLimits | None = None,
        pool_size: int = 1,
        slots: int = 8,
        uid_base: int = 1_900_000_000,
        accel: str = "auto",
        warm: bool = True,
        host_share: HostShare = HostShare(),  # noqa: B008 (frozen)
    ) -> None:
        """Set up the node's directory, launcher and cgroup, pick the accelerator, start filling the pool.

        Args:
            warm: the guest runs sh, jq and python3 once before it says it is ready (as the tool's user):
                under TCG a program's first run translates its code, so the call's run is about 200 ms
                shorter, for about a second more of boot (in the pool's background).

        Raises:
            VmError: reason "no_slot" when QEMU, the guest, a C compiler, cgroups or the uid range are
                not usable.
        """
        qemu = shutil.which(QEMU)
        if qemu is None:
            raise VmError(
                "no_slot", f"{QEMU} is not installed (Debian package `qemu-system-x86`; `make setup`)"
            )
        if accel not in ACCELS:
            raise VmError("no_slot", f"B3OS_MICROVM_ACCEL={accel!r} is not one of {', '.join(ACCELS)}")
        self.qemu = qemu
        self.guest = guest
        self.limits = limits or VmLimits()
        self.pool_size = pool_size
        self.warm = warm
        self.node_dir = run_dir / f"microvm-{os.getpid()}-{secrets.token_hex(3)}"
        # a unix socket's path has at most 107 bytes: <node dir>/mvm-<12 hex>/port.sock
        if len(os.fsencode(self.node_dir)) + 27 > 107:
            raise VmError(
                "no_slot", f"B3OS_RUN_DIR={run_dir} is too long for the VMs' sockets: use a shorter one"
            )
        self.uids = UidPool(uid_base, slots + pool_size + 1)
        self.boot_ms: deque[float] = deque(maxlen=64)  # the last boots, for the bench and the status
        self._pool: deque[MicroVm] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._booting = 0
        self._fillers: list[threading.Thread] = []
        self._trees: LRUCache[tuple[str, float], tuple[list[dict[str, Any]], bytes]] = LRUCache(maxsize=16)
        self._trees_lock = threading.Lock()
        self._cg_limits = CgroupLimits(
            (self.limits.memory_mb + QEMU_OVERHEAD_MB) << 20, self.limits.vcpu, QEMU_PIDS
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        for line in cleanup_stale(run_dir):
            log.warning("removed what a dead node left: %s", line)
        self._fds: list[int] = []
        try:
            make_dir(self.node_dir, 0o711)
            launcher_dir = self.node_dir / "launcher"
            make_dir(launcher_dir, 0o755)
            mounts.tmpfs(launcher_dir, size_bytes=8 << 20, uid=0, gid=0, inodes=16, mode=0o755, exec_ok=True)
            self.launcher = build_launcher(launcher_dir) / LAUNCHER_NAME
            self._fds = [os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in (guest.kernel, guest.initrd)]
            self.cgroups = NodeCgroups.open(f"b3os-node-{os.getpid()}")
            try:
                self.cgroups.weigh(host_share.weight, host_share.cap_cpus(self.cgroups.cpus_above()))
            except (CgroupError, ValueError) as exc:
                log.warning("the microVMs keep the host's default CPU weight, without a cap: %s", exc)
        except (OSError, mounts.MountError, CgroupError, LauncherError) as exc:
            self._close_fds()
            mounts.remove_tree(self.node_dir)
            self.uids.close()
            raise VmError("no_slot", f"the microvm driver cannot start: {exc}") from exc
        try:
            self.accel, self.accel_reason, self._gid = self._choose_accel(accel)
        except VmError:
            self._closed = True
            self.close(force=True)
            raise
        log.warning("microvm driver: %s (%s)", self.accel, self.accel_reason)
        self._fillers = [
            threading.Thread(target=self._fill, name=f"b3os-microvm-pool-{i}", daemon=True)
            for i in range(min(FILLERS, pool_size))
        ]
        for thread in self._fillers:
            thread.start()

    def _choose_accel(self, wanted: str) -> tuple[str, str, int | None]:
        """("kvm" | "tcg", why, the group QEMU runs as for /dev/kvm)."""
        if wanted == "tcg":
            return "tcg", "B3OS_MICROVM_ACCEL=tcg", None
        gid, why = kvm_group()
        if gid is None:
            if wanted == "kvm":
                raise VmError("no_slot", f"B3OS_MICROVM_ACCEL=kvm, but {why}")
            return "tcg", why, None
        try:
            vm = self._boot("kvm", gid, time.monotonic() + PROBE_S)
        except (OSError, CgroupError, ChannelClosed, _NoUid) as exc:
            if wanted == "kvm":
                raise VmError(
                    "no_slot", f"B3OS_MICROVM_ACCEL=kvm, but no guest booted on KVM: {exc}"
                ) from exc
            return "tcg", f"a guest did not boot on KVM in {PROBE_S:g} s: {exc}", None
        if self.pool_size:
            self._pool.append(vm)  # the probe's guest serves a call like any other
        else:
            vm.delete()
        return "kvm", f"a guest booted on KVM in {vm.boot_ms:.0f} ms", gid

    def pool_ready(self) -> int:
        return len(self._pool)

    def pool_target(self) -> int:
        return self.pool_size

    def boots_ms(self) -> list[float]:
        return list(self.boot_ms)

    def tool_tree(self, src: Path) -> tuple[list[dict[str, Any]], bytes]:
        """An installed tool's entries and bytes for the guest (an installed version never changes, so
        they are kept for the next calls; the key has the tree's mtime in case it was installed again).

        Raises:
            OSError: the tree cannot be read.
        """
        key = (str(src), src.stat().st_mtime)
        with self._trees_lock:
            found = self._trees.get(key)
        if found is None:
            found = tree_entries(src)
            with self._trees_lock:
                self._trees[key] = found
        return found

    def claim(self, deadline: float) -> Vm:
        while True:
            with self._cond:
                if self._closed:
                    raise VmError("no_slot", "the node is shutting down")
                vm = self._pool.popleft() if self._pool else None
                self._cond.notify_all()
            if vm is None:
                break
            if vm.alive():
                return vm
            log.warning("microVM %s died in the pool", vm.id)
            vm.delete()
        if time.monotonic() >= deadline:
            raise VmError("no_slot", "the call's time ran out before a VM was free")
        try:
            return self._boot(self.accel, self._gid, deadline)
        except (OSError, CgroupError, ChannelClosed, _NoUid) as exc:
            log.warning("no microVM could be booted: %s", exc)
            raise VmError("no_slot", f"no VM could be booted in the call's time: {exc}") from exc

    def _boot(self, accel: str, gid: int | None, deadline: float) -> MicroVm:
        """A booted VM whose init waits for the call.

        Raises:
            _NoUid: every VM uid is in use.
            ChannelClosed: QEMU or the guest did not come up by `deadline`.
        """
        with self._cond:
            uid = self.uids.take()
        if uid is None:
            raise _NoUid(f"all {self.uids.count} VM uids are in use")
        vm_id = f"mvm-{secrets.token_hex(6)}"
        path = self.node_dir / vm_id
        vm: MicroVm | None = None
        try:
            make_dir(path, 0o700)
            os.chown(path, uid, uid)
            vm = MicroVm(self, vm_id, path, self.cgroups.create_call(vm_id, self._cg_limits), uid)
            cgroup_fds = [os.open(p / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for p in vm.cgroup.paths]
            try:
                joins = ",".join(map(str, cgroup_fds)) or "-"
                as_vm = [
                    str(self.launcher),
                    "--as",
                    str(uid),
                    str(gid if gid is not None else uid),
                    "-1",
                    joins,
                ]
                qemu = qemu_argv(self.qemu, accel, self.limits, path, *self._fds, warm=self.warm)
                argv = [*as_vm, *qemu]
                vm.boot(argv, (*cgroup_fds, *self._fds), min(deadline, time.monotonic() + BOOT_S))
            finally:
                for fd in cgroup_fds:
                    os.close(fd)
        except BaseException:
            if vm is not None:
                self.destroy(vm)
            else:
                shutil.rmtree(path, ignore_errors=True)
                self._give_uid(uid)
            raise
        self.boot_ms.append(vm.boot_ms)
        return vm

    def _give_uid(self, uid: int) -> None:
        with self._cond:
            self.uids.give(uid)
            self._cond.notify_all()

    def destroy(self, vm: MicroVm) -> None:
        """Kill the VM's QEMU and processes, give its uid back, remove its cgroup and directory."""
        try:
            vm.stop()
        finally:
            self._give_uid(vm.uid)
            vm.remove()

    def _fill(self) -> None:
        name_os_thread()
        while True:
            with self._cond:
                while not self._closed and (
                    len(self._pool) + self._booting >= self.pool_size or not self.uids.free
                ):
                    self._cond.wait()
                if self._closed:
                    return
                self._booting += 1
            try:
                vm = self._boot(self.accel, self._gid, time.monotonic() + BOOT_S)
            except (OSError, CgroupError, ChannelClosed, _NoUid) as exc:
                log.warning("booting a microVM failed: %s", exc)
                with self._cond:
                    self._booting -= 1
                    self._cond.notify_all()
                time.sleep(1.0)
                continue
            with self._cond:
                self._booting -= 1
                self._cond.notify_all()
                if not self._closed:
                    self._pool.append(vm)
                    continue
            vm.delete()
            return

    def settle(self, timeout_s: float = 120.0) -> int:
        """Wait until the pool is full (or `timeout_s`); return how many VMs wait in it."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while time.monotonic() < end and len(self._pool) < self.pool_size:
                self._cond.wait(0.05)
            return len(self._pool)

    def _close_fds(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def close(self, *, force: bool = False) -> None:
        """Delete the pooled VMs and everything the driver made (`force`: also when half set up)."""
        with self._cond:
            if self._closed and not force:
                return
            self._closed = True
            pool = list(self._pool)
            self._pool.clear()
            self._cond.notify_all()
        for thread in self._fillers:
            thread.join(timeout=BOOT_S)
        for vm in pool:
            vm.delete()
        if not self.cgroups.children():  # the node's group, unless another driver of this process uses it
            with contextlib.suppress(CgroupError):
                self.cgroups.remove()
        self._close_fds()
        mounts.remove_tree(self.node_dir)
        self.uids.close()


class _NoUid(Exception):
    """Every VM uid is in use."""
