"""Where a burst of runs spends its time (`bench goals`, "100 one-step routines"): each run's phases read
from its Temporal history, and the CPU each kind of the stack's processes used meanwhile."""

from __future__ import annotations

import collections
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

KINDS = (
    ("temporal", "server start-dev"),
    ("api", "api.main:create_app"),
    ("worker", "engine.worker"),
    ("node", "node run"),
    ("egress", "egress run"),
    ("bare SDK worker", "bench.temporal_floor"),
)
"""A stack process's kind, by a part of its command line."""

PHASES = ("start", "wait", "act", "end")
"""A run's phases: its start and its end since the burst's, its first workflow task's wait at the server,
its activities' run."""


VMS = "node's VMs"
"""The kind of the CPU a node's VMs used (its children's, once it has reaped them)."""


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by each kind of this process's children (the stack's processes), and by
    the node's VMs (`VMS`: the processes of the VMs it has removed, counted by the kernel when reaped)."""
    me, tick = str(os.getpid()), os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[1] == me:
            kind = next((k for k, words in KINDS if words in argv), "other")
            used[kind] = used.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
            if kind == "node":
                used[VMS] = used.get(VMS, 0.0) + (int(fields[13]) + int(fields[14])) / tick
    return used


def cpu_used(before: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each kind (`cpu_seconds`) since `before`, rounded to 0.01 s."""
    return {k: round(v - before.get(k, 0.0), 2) for k, v in sorted(cpu_seconds().items())}


TEMPORAL_SHOWN = (
    "persistence:UpdateWorkflowExecution",
    "service:RecordActivityTaskHeartbeat",
    "service:CountWorkflowExecutions",
)
"""The Temporal operations a run's own code decides (the rest are the workflow's two tasks and one
activity), shown by name in the table."""

_COUNTER = re.compile(r"^(service_requests|persistence_requests)\{([^}]*)\} ([0-9.e+]+)$")
_OPERATION = re.compile(r'operation="([^"]*)"')


def temporal_operations(metrics_url: str | None) -> collections.Counter[str]:
    """The Temporal server's request and persistence counters so far (`service:<operation>`,
    `persistence:<operation>`), from its Prometheus metrics (none without a URL). A request that passes
    the frontend and then the history service counts once in each."""
    counts: collections.Counter[str] = collections.Counter()
    if metrics_url is None:
        return counts
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        found = _COUNTER.match(line)
        if found is None:
            continue
        name, labels, value = found.groups()
        operation = _OPERATION.search(labels)
        kind = "service" if name == "service_requests" else "persistence"
        counts[f"{kind}:{operation.group(1) if operation else ''}"] += float(value)
    return counts


async def where_time_went(
    stack: Any,
    workflow_ids: list[str],
    began: float,
    cpu_before: dict[str, float],
    temporal_before: collections.Counter[str] | None = None,
    metrics_url: str | None = None,
) -> dict[str, Any]:
    """The runs' phases, ms p50 and max (started and ended: since `began`, a `time.time()`), the CPU
    seconds of each kind of process since `cpu_before` (`cpu_seconds()`), with the wall time, and the
    Temporal server's operations per run since `temporal_before` (`temporal_operations()`)."""
    from temporalio.api.enums.v1 import EventType as E

    wall = time.time() - began
    cpu_s = cpu_used(cpu_before)
    temporal = temporal_operations(metrics_url) - (temporal_before or collections.Counter())
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    for workflow_id in workflow_ids:
        at: dict[int, list[float]] = {}
        for event in await stack.history(workflow_id):
            at.setdefault(event.event_type, []).append(event.event_time.ToMicroseconds() / 1e6 - began)
        starts = at.get(E.EVENT_TYPE_ACTIVITY_TASK_STARTED, [])
        ends = at.get(E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, [])
        phases["start"].append(at[E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED][0])
        phases["wait"].append(
            at[E.EVENT_TYPE_WORKFLOW_TASK_STARTED][0] - at[E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED][0]
        )
        phases["act"].append(sum(end - start for start, end in zip(starts, ends, strict=False)))
        phases["end"].append(max(at.get(E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, [wall])))
    return {
        "phases_ms": {
            name: {"p50": statistics.median(ms) * 1000, "max": max(ms) * 1000}
            for name, ms in phases.items()
            if ms
        },
        "cpu_s": cpu_s,
        "wall_s": wall,
        "temporal_per_run": {
            op: round(n / len(workflow_ids), 2) for op, n in temporal.most_common() if workflow_ids
        },
    }


def cpu_row(label: str, wall_s: float, cpu_s: dict[str, float]) -> tuple[str, str]:
    """A line for the goals table: the CPU seconds of each kind (`cpu_used`) used in `wall_s` seconds,
    with their sum (the most the machine's cores could give is `wall_s` times their number)."""
    used = sorted(((kind, s) for kind, s in cpu_s.items() if s >= 0.05), key=lambda kv: -kv[1])
    each = ", ".join(f"{kind} {s:.1f}" for kind, s in used)
    return (
        f"{label} in its {wall_s:.1f} s on {os.cpu_count()} cores",
        f"{sum(cpu_s.values()):.1f} in all: {each}",
    )


def rows(where: dict[str, Any]) -> list[tuple[str, str]]:
    """Two lines for the goals table: the phases, and the CPU beside the wall time (none without them)."""
    if not where:
        return []
    ms = where["phases_ms"]
    shown = [name for name in PHASES if name in ms]
    phases = " / ".join(f"{ms[name]['p50']:.0f} ({ms[name]['max']:.0f})" for name in shown)
    lines = [
        ("  ms, p50 (max): " + "/".join(shown), phases),
        cpu_row("  CPU s", where["wall_s"], where["cpu_s"]),
    ]
    ops = where.get("temporal_per_run") or {}
    if ops:
        total = {
            kind: sum(n for op, n in ops.items() if op.startswith(kind))
            for kind in ("service", "persistence")
        }
        named = ", ".join(f"{op.split(':')[1]} {ops.get(op, 0):g}" for op in TEMPORAL_SHOWN)
        lines.append(
            (
                "  Temporal per run",
                f"{total['service']:.1f} requests, {total['persistence']:.1f} persistence ops; {named}",
            )
        )
    return lines
