"""A VM's group is killed whole: every process in it and what it forks meanwhile, with pidfds or without."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest
from workers import PATIENCE_S

from node.vm.cgroups import CgroupLimits, NodeCgroups

FORKER = """
import os, sys, time
sys.stdin.readline()
while True:
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:  # the group's pids limit: again, as a fork bomb would
        time.sleep(0.001)
"""


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfds", "no-pidfds"])
def test_killing_a_group_ends_every_process_in_it_and_what_it_forks_meanwhile(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = NodeCgroups.open(f"b3os-test-kill-{os.getpid()}")
    try:
        group = node.create_call("vm", CgroupLimits(memory_bytes=256 << 20, vcpu=1, pids_max=64))
        # a process forking sleepers as fast as it can, up to the group's pids limit and on, once it is
        # in the group (as a VM's init waits for its group); a shell would give up at the limit
        forker = subprocess.Popen(
            [sys.executable, "-c", FORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert forker.stdin is not None
        group.add(forker.pid)
        forker.stdin.write(b"go\n")
        forker.stdin.close()
        end = time.monotonic() + PATIENCE_S
        while len(group.pids()) < 20 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(group.pids()) >= 20
        if not pidfds:  # a kernel without pidfd_open: the group is read again every millisecond

            def no_pidfd(pid: int, flags: int = 0) -> int:
                raise OSError(errno.ENOSYS, "no pidfd_open")

            monkeypatch.setattr(os, "pidfd_open", no_pidfd)
        assert group.kill() is True
        assert group.pids() == []
        assert forker.wait(timeout=5) == -9
    finally:
        monkeypatch.undo()
        node.remove()
