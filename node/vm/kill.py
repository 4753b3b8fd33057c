"""Every process of a VM killed at once and waited for on their pidfds (`node.vm.cgroups.CallCgroup.kill`)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time


def kill_and_wait(pids: list[int], end: float) -> None:
    """SIGKILL `pids` and wait (until `end` at most) for them to end: on their pidfds, readable the moment
    each process ends, rather than polling the group every millisecond (a VM's init takes about a
    millisecond to end, its namespaces with it); where pidfds are not supported, a millisecond's sleep."""
    fds: list[int] = []
    unwatched = False
    try:
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:  # no pidfds here
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                unwatched = True
                continue
            fds.append(fd)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = len(fds)
        while left and (wait_ms := int((end - time.monotonic()) * 1000) + 1) > 0:
            for fd, _ in poller.poll(min(wait_ms, 100)):
                poller.unregister(fd)
                left -= 1
        if unwatched:
            time.sleep(0.001)
    finally:
        for fd in fds:
            os.close(fd)
