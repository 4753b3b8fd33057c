"""Figures of a process read from /proc (its CPU, its VM pool threads' CPU, its resident memory) and the
percentiles the benches report."""

from __future__ import annotations

import os
import statistics
from pathlib import Path


def p50(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] if ordered else float("nan")


def _stat_cpu_ms(stat: Path) -> tuple[float, float]:
    """The user and kernel CPU (ms) of a `/proc` `stat` file: a process's (not its children's), a thread's."""
    fields = stat.read_text().rpartition(")")[2].split()
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return int(fields[11]) * tick_ms, int(fields[12]) * tick_ms


def cpu_split_ms(pid: int) -> tuple[float, float]:
    """CPU a process has used so far in user mode and in the kernel (not its children's), ms."""
    return _stat_cpu_ms(Path(f"/proc/{pid}/stat"))


def pool_cpu_ms(pid: int) -> float:
    """CPU the node's VM pool threads (named `b3os-vm-*` for the OS: node.vm.bwrap) have used so far, ms:
    preparing and removing VMs, off the calls' path."""
    used = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("b3os-vm-"):
                used += sum(_stat_cpu_ms(task / "stat"))
        except FileNotFoundError:  # a thread that has just ended
            continue
    return used


def rss_mib(pid: int) -> float:
    """A process's resident memory (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
