"""The goals' table (`bench goals`): one row per figure, beside its floor and its target, and whether it is
met."""

from __future__ import annotations

from typing import Any

from bench import burst


def rows_of(r: dict[str, Any]) -> list[tuple[str, str, str, str, bool | None]]:
    """(goal, measured, floor, goal, met) rows of the results."""
    rows: list[tuple[str, str, str, str, bool | None]] = []

    def add(name: str, value: str, floor: str, goal: str, met: bool | None) -> None:
        rows.append((name, value, floor, goal, met))

    if "api_share_ms" in r:
        floor = r.get("floor_api_cpu_per_call_ms")
        add(
            "api's CPU per noop call (/proc)",
            f"{r['api_cpu_per_call_ms']:.2f} ms ({r.get('api_sys_per_call_ms', 0):.2f} in the kernel)",
            "" if floor is None else f"bare FastAPI {floor:.2f} ms",
            "<= 2.5 ms",
            r["api_cpu_per_call_ms"] <= 2.5,
        )
        add(
            "node's CPU per noop call (/proc)",
            f"{r['node_cpu_per_call_ms']:.2f} ms ({r.get('node_sys_per_call_ms', 0):.2f} in the kernel)",
            "",
            "<= 3 ms",
            r["node_cpu_per_call_ms"] <= 3,
        )
        if "node_pool_cpu_per_call_ms" in r:
            pool = r["node_pool_cpu_per_call_ms"]
            add("  of which its VM pool's threads", f"{pool:.2f} ms", "", "", None)
            add("  the rest: the call's own path", f"{r['node_cpu_per_call_ms'] - pool:.2f} ms", "", "", None)
        add(
            "  api's share of a noop call's time, p50",
            f"{r['api_share_ms']:.2f} ms",
            f"node {r['noop_node_ms']:.2f} ms",
            "",
            None,
        )
        # counted in the api's share too: the floor of that measure
        add("  the node's own, outside its phases", f"{r['node_share_ms']:.2f} ms", "", "", None)
        ratio = r["noop_api_ms"] / r["noop_bare_ms"]
        add(
            "noop over POST /v1/actions/call, p50",
            f"{r['noop_api_ms']:.2f} ms = {ratio:.2f}x bare",
            f"bare {r['noop_bare_ms']:.2f} ms",
            "<= 4x bare",
            ratio <= 4,
        )
        if "noop_floor_api_ms" in r:  # the api's floor, and the node's (no api at all)
            floor_ms = r["noop_floor_api_ms"]
            floor = f"{floor_ms:.2f} ms = {floor_ms / r['noop_bare_ms']:.2f}x bare"
            node_alone = f"node {r['noop_node_ms'] / r['noop_bare_ms']:.2f}x bare"
            add("  the same over a bare FastAPI, p50", floor, node_alone, "", None)
        ratio = r["api_calls_per_s"] / r["node_calls_per_s"]
        add(
            "calls/s, 8 in flight over 2 api processes",
            f"{r['api_calls_per_s']:.1f}/s = {ratio:.2f}x node",
            f"node {r['node_calls_per_s']:.1f}/s",
            ">= 0.9x node",
            ratio >= 0.9,
        )
        ratio = r["echo_file_ms"] / r["echo_ms"]
        add(
            "echo with a 6-byte file, p50",
            f"{r['echo_file_ms']:.2f} ms = {ratio:.2f}x",
            f"echo {r['echo_ms']:.2f} ms",
            "<= 1.1x",
            ratio <= 1.1,
        )
        ratio = r["echo_file_platform_ms"] / r["echo_platform_ms"]
        add(
            "  the same, tool's run phase left out",
            f"{r['echo_file_platform_ms']:.2f} ms = {ratio:.2f}x",
            f"echo {r['echo_platform_ms']:.2f} ms",
            "(<= 1.1x)",
            ratio <= 1.1,
        )
    if "http_runtime_ms" in r:
        extra = r["http_runtime_ms"] - r["http_direct_ms"]
        add(
            "HTTP action: runtime + proxy, p50",
            f"{r['http_runtime_ms']:.2f} ms = +{extra:.2f} ms",
            f"direct {r['http_direct_ms']:.2f} ms",
            "<= +5 ms",
            extra <= 5,
        )
    if "step_temporal_ms" in r:
        ratio = r["step_temporal_ms"] / r["floor_step_temporal_ms"]
        add(
            "a routine step's Temporal share, p50",
            f"{r['step_temporal_ms']:.2f} ms = {ratio:.2f}x bare",
            f"bare SDK {r['floor_step_temporal_ms']:.2f} ms",
            "<= 1.15x bare",
            ratio <= 1.15,
        )
        add("  bare SDK, in-memory server", f"{r['floor_memory_step_temporal_ms']:.2f} ms", "", "", None)
        if "floor_node_step_temporal_ms" in r:
            same = r["floor_node_step_temporal_ms"]
            value = f"{same:.2f} ms; the step {r['step_temporal_ms'] / same:.2f}x it"
            add("  bare SDK, its activity the noop on the node", value, "", "", None)
        tasks, floor_tasks = r["step_workflow_tasks_ms"], r["floor_step_workflow_tasks_ms"]
        add("  of which workflow tasks", f"{tasks:.2f} ms", f"bare SDK {floor_tasks:.2f} ms", "", None)
        add("  the step's activity", f"{r['step_activity_ms']:.2f} ms", "", "", None)

    def floor_cpu(floor: str) -> None:  # a floor's burst: its CPU by kind of process
        if f"{floor}_burst_100_cpu_s" in r:
            label, value = burst.cpu_row(
                "    its CPU s", r[f"{floor}_burst_100_wall_s"], r[f"{floor}_burst_100_cpu_s"]
            )
            add(label, value, "", "", None)

    if "burst_100_s" in r:
        lost = r.get("runs_not_started", 0)
        ratio = r["burst_100_s"] / r["floor_burst_100_s"]
        add(
            "100 one-step routines, 25 orgs, at once",
            f"{r['burst_100_s']:.2f} s = {ratio:.2f}x bare" + (f", {lost} not started" if lost else ""),
            f"bare SDK {r['floor_burst_100_s']:.2f} s",
            "<= 1.3x bare",
            ratio <= 1.3 and not lost,
        )
        floor_cpu("floor")
        add("  bare SDK, in-memory server", f"{r['floor_memory_burst_100_s']:.2f} s", "", "", None)
        if "floor_node_burst_100_s" in r:
            ratio = r["floor_node_burst_100_s"] / r["floor_burst_100_s"]
            value = f"{r['floor_node_burst_100_s']:.2f} s = {ratio:.2f}x bare"
            add("  bare SDK, its activity the noop on the node", value, "", "", None)
        floor_cpu("floor_node")
        add("  all started", f"{r['burst_100_started_s']:.2f} s", "", "", None)
        for label, value in burst.rows(r.get("burst_100_where") or {}):
            add(label, value, "", "", None)
    if "waits_3x4x2s_s" in r:
        add(
            "3 x foreach 4 x 2 s tool, one org",
            f"{r['waits_3x4x2s_s']:.2f} s",
            "6 s of work",
            "<= 9 s",
            r["waits_3x4x2s_s"] <= 9,
        )
    for name, mem in r.get("memory_mib", {}).items():
        growth = mem["after_all"] - mem["after_half"]
        add(
            f"RSS {name}: rest / {r['memory_calls'] // 2} / {r['memory_calls']} calls",
            f"{mem['rest']:.0f} / {mem['after_half']:.0f} / {mem['after_all']:.0f} MiB",
            "",
            "no growth (<= 2 MiB)",
            growth <= 2,
        )
    return rows  # fmt: skip


def print_table(results: dict[str, Any]) -> None:
    rows = rows_of(results)
    print(f"{'goal':<46}{'measured':<34}{'floor':<24}{'target':<20}met")
    for name, value, floor, goal, met in rows:
        mark = "" if met is None else ("yes" if met else "NO")
        print(f"{name:<46}{value:<34}{floor:<24}{goal:<20}{mark}")
