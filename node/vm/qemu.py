"""QEMU's command line for one microVM, and the host facts it depends on (KVM's group, the TSC's rate).

No network device, no disk: one virtio-serial port (the node's channel to the guest's init, a unix
socket in the VM's directory where QEMU waits for the node), a virtio entropy source, the kernel and the
initramfs read through descriptors the node opened, and QEMU's own seccomp filter.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from pathlib import Path

from node.vm.sandbox import VmLimits


def kvm_group(device: Path = Path("/dev/kvm")) -> tuple[int | None, str]:
    """The group that may use `device` (its read and write bits for the group), or None and why not."""
    try:
        st = os.stat(device)
    except OSError:
        return None, f"{device} does not exist (no KVM on this host)"
    if st.st_gid == 0 or st.st_mode & 0o060 != 0o060:
        return None, (
            f"{device} is mode {stat.S_IMODE(st.st_mode):04o} in group {st.st_gid}: the VMs' uids cannot "
            "open it (give it the kvm group, mode 0660)"
        )
    return st.st_gid, ""


@functools.cache
def host_tsc_khz() -> int | None:
    """The host's TSC frequency when it is constant (the guest's under TCG too), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = re.search(r"^flags\s*:(.*)$", info, re.M)
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M)
    if flags is None or mhz is None or "constant_tsc" not in flags.group(1).split():
        return None
    return round(float(mhz.group(1)) * 1000)


def kernel_cmdline(limits: VmLimits, *, warm: bool = True) -> str:
    """The guest kernel's command line: quiet, no reboot loop, no timer calibration a busy TCG host fails
    (a guest whose PIT calibration fails hangs), and the sizes of the guest's tmpfs for its init."""
    words = ["console=ttyS0", "quiet", "panic=-1", "mitigations=off", "tsc=reliable", "no_timer_check"]
    khz = host_tsc_khz()
    if khz:
        words.append(f"tsc_early_khz={khz}")
    sizes = {"work_mb": limits.work_mb, "tmp_mb": limits.tmp_mb, "shm_mb": limits.shm_mb,
             "out_kb": limits.out_kb, "in_kb": limits.in_kb, "pids": limits.pids_max}  # fmt: skip
    words.append("b3os.limits=" + ",".join(f"{k}:{v}" for k, v in sizes.items()))
    if warm:
        words.append("b3os.warm")
    return " ".join(words)


def qemu_argv(
    qemu: str,
    accel: str,
    limits: VmLimits,
    vm_dir: Path,
    kernel_fd: int,
    initrd_fd: int,
    *,
    warm: bool = True,
) -> list[str]:
    """QEMU's command line for one VM (no network device, no disk, one virtio-serial port, an entropy
    source, its own seccomp filter)."""
    return [
        qemu, "-M", "microvm", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-accel", "kvm" if accel == "kvm" else "tcg,tb-size=64", "-cpu", "host" if accel == "kvm" else "max",
        "-smp", str(limits.vcpu), "-m", f"{limits.memory_mb}M",
        "-kernel", f"/proc/self/fd/{kernel_fd}", "-initrd", f"/proc/self/fd/{initrd_fd}",
        "-append", kernel_cmdline(limits, warm=warm),
        "-serial", f"file:{vm_dir / 'console.log'}",
        "-device", "virtio-serial-device",
        "-chardev", f"socket,id=port,path={vm_dir / 'port.sock'},server=on,wait=on",
        "-device", "virtserialport,chardev=port,name=b3os",
        "-object", "rng-random,filename=/dev/urandom,id=rng", "-device", "virtio-rng-device,rng=rng",
        "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    ]  # fmt: skip
