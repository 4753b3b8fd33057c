"""What each test process has of its own when pytest-xdist runs the suite in parallel: loopback ports and
the VMs' host uids.

Each worker (`gw0`, `gw1`, ...; a run without xdist is worker 0) takes its ports from a range of its own
below the kernel's ephemeral range, so that a port one worker found free is not handed to another worker's
server or client in the moment before it is bound, and its VMs' uids from a range of its own, so that two
workers' VMs never share a uid (the node tests check what a uid alone may see and do).
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or "0")
"""This process's worker number."""

PORTS_PER_WORKER = 1000
_FIRST_PORT = 20_000 + WORKER * PORTS_PER_WORKER
_next_port = itertools.cycle(range(_FIRST_PORT, _FIRST_PORT + PORTS_PER_WORKER))

UIDS_PER_WORKER = 1024
TEST_VM_UID_BASE = 264_000 + WORKER * UIDS_PER_WORKER
"""The first VM uid of this worker's in-process drivers and node processes (tests/node)."""
STACK_VM_UID_BASE = 1_900_000_000 + WORKER * UIDS_PER_WORKER
"""The first VM uid of this worker's stacks' nodes (tests/calls/stack.py), 64 a node, 8 nodes."""
DEV_VM_UID_BASE = STACK_VM_UID_BASE + UIDS_PER_WORKER // 2
"""The first VM uid of the nodes of this worker's `b3os dev` stacks (tests/stack)."""


def free_port() -> int:
    """A loopback port of this worker's range that nothing listens on now."""
    for _ in range(PORTS_PER_WORKER):
        port = next(_next_port)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_FIRST_PORT}..{_FIRST_PORT + PORTS_PER_WORKER - 1}")


PATIENCE_S = 60.0
"""How long a test waits for something that must happen (a process to answer, a call to start, a run to
end): long enough for a machine as busy as any the suite runs on, so that only what never happens fails
(pytest-timeout ends a test at 120 s)."""


def node_cgroups(pid: int) -> list[Path]:
    """The cgroups of the node process `pid` below the hierarchies' roots: a walk that passes over the groups
    other workers' nodes make and remove meanwhile (a glob fails on a group removed while it reads)."""
    name = f"b3os-node-{pid}"
    roots = [p for p in Path("/sys/fs/cgroup").iterdir() if p.is_dir()]
    return [Path(d) / name for root in roots for d, subdirs, _ in os.walk(root) if name in subdirs]
