"""How a prepared VM's bwrap is spawned: through the launcher's `--as` mode, which joins the VM's cgroup
(so bwrap's cgroup namespace is rooted at the VM's group and every process of the VM is in it from its
first instruction), enters the node's small mount namespace (`node/vm/holder.py`: bwrap copies the mount
table of the namespace it starts in, and the host's can be large), drops to the VM's user and execs bwrap.
bwrap's options come through a pipe (`--args`, so `ps` shows no VM path), and so does the seccomp filter.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from node.vm.bwrap_vm import BwrapVm
from node.vm.launcher import VM_PATH
from node.vm.pipes import pipe_of


def spawn(
    vm: BwrapVm,
    *,
    bwrap: str,
    launcher: Path,
    ns_fd: int,
    seccomp: bytes,
    options: Callable[[int, int, int], list[str]],
) -> None:
    """Start the VM's bwrap and wait until its launcher waits for the command (`BwrapVm.start`).

    Args:
        launcher: the launcher's path on the host.
        ns_fd: the holder's mount namespace (-1: the node's own).
        seccomp: the compiled filter for bwrap's `--seccomp`.
        options: bwrap's options for the status, block and seccomp descriptors it is given.

    Raises:
        OSError: the process could not be started.
        SetupError: bwrap or the launcher did not come up.
    """
    status_r, status_w = os.pipe()
    block_r, block_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    err_r, err_w = os.pipe()
    seccomp_r = pipe_of(seccomp)
    args_r = pipe_of(b"".join(a.encode() + b"\0" for a in options(status_w, block_r, seccomp_r)))
    cgroup_fds = [os.open(p / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for p in vm.cgroup.paths]
    theirs = (status_w, block_r, ctl_r, err_w, seccomp_r, args_r, *cgroup_fds)
    try:
        # The launcher drops to the VM's user and execs bwrap: Popen can then use vfork (with `user=` it
        # forks the whole node process, about 2 ms of CPU per VM).
        # It joins the VM's cgroup first: bwrap's cgroup namespace is then rooted at the VM's group.
        joins = ",".join(map(str, cgroup_fds)) or "-"
        as_vm_user = [str(launcher), "--as", str(vm.uid), str(vm.uid), str(ns_fd), joins]
        vm.proc = subprocess.Popen(
            [*as_vm_user, bwrap, "--args", str(args_r), "--", VM_PATH, str(ctl_r), str(err_w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(*theirs, ns_fd) if ns_fd >= 0 else theirs,
            start_new_session=True,
            cwd="/",
            env={},
        )
    except OSError:
        for fd in (*theirs, status_r, block_w, ctl_w, err_r):
            os.close(fd)
        raise
    finally:
        if vm.proc is not None:
            for fd in theirs:
                os.close(fd)
    vm.start((status_r, block_w, ctl_w, err_r))
