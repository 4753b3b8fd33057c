"""Measuring what a VM used while its command ran.

CPU: the cgroup's CPU accounting (`cpuacct.usage` on v1, `cpu.stat usage_usec` on v2) at the end of the run,
in vCPU-milliseconds. Memory: the cgroup's memory usage (`memory.usage_in_bytes` / `memory.current`) is
sampled about every 10 ms while the command runs (the runner's poll loop wakes at least that often) and
integrated with the rectangle rule, each interval at the usage read at its end; the last interval, from the
last sample to the command's exit, counts at the group's peak usage (`memory.max_usage_in_bytes` /
`memory.peak`), because the process's memory is already freed when its exit is seen. So a call shorter than
one interval is charged its peak memory for its whole run. Both figures are rounded up, and a call whose
command ran is charged at least 1 vcpu_ms and 1 gib_ms.
"""

from __future__ import annotations

import math
import time

from node.vm.base import Usage
from node.vm.cgroups import CallCgroup

SAMPLE_S = 0.010
GIB = float(1 << 30)


class UsageMeter:
    """Integrates one cgroup's memory over time and reads its CPU time."""

    def __init__(self, cgroup: CallCgroup) -> None:
        self._cgroup = cgroup
        self._cpu0 = cgroup.cpu_ns()
        self._start = self._last = time.monotonic()
        self._byte_s = 0.0
        self._end: float | None = None
        self.samples = 0

    def sample(self) -> None:
        """Read the memory now if a sampling interval has passed."""
        now = time.monotonic()
        if now - self._last >= SAMPLE_S:
            self._byte_s += self._cgroup.memory_bytes() * (now - self._last)
            self._last = now
            self.samples += 1

    def finish(self) -> None:
        """Close the last interval at the group's peak usage."""
        if self._end is not None:
            return
        now = time.monotonic()
        peak = max(self._cgroup.memory_peak(), self._cgroup.memory_bytes())
        self._byte_s += peak * (now - self._last)
        self._end = self._last = now

    def usage(self) -> Usage:
        """vCPU-ms and GiB-ms used, rounded up, at least 1 each."""
        self.finish()
        cpu_ms = (self._cgroup.cpu_ns() - self._cpu0) / 1e6
        gib_ms = self._byte_s * 1000 / GIB
        return Usage(vcpu_ms=max(1, math.ceil(cpu_ms)), gib_ms=max(1, math.ceil(gib_ms)))
