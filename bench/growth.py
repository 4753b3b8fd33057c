"""How cost grows (issue 36, item 3): the same work at two sizes, side by side in one stack.

Starts the routine tests' stack (bench/routinestack.py) with the per-organization limits raised so that
only the engine's own cost is measured (`GROWTH_SETTINGS`), then, small size first:

- **runs**: 100 and then 1,000 one-step runs (the free echo's `noop`) of 25 organizations, started at
  once; the time per run is the wall time until the last has ended, over the runs;
- **foreach**: one run whose step has a foreach of 100 and then 1,000 items (the most one workflow
  history carries, `engine.runs.FOREACH_CHUNK_ITEMS`), each a call of the free `noop`; the time per
  item, with the run's history size (events and bytes: Temporal refuses a history past 51,200 events or
  50 MB); after the rounds, once, 10,000 items (the most a foreach takes, `FOREACH_MAX_ITEMS`: ten child
  workflows of 1,000), with the largest history among the run's and its chunks';
- **steps**: a routine of 20 and then 200 steps, each needing the one before; the time per step, with
  the history size;

and the RSS of each api process, worker and node at rest before, after the small sizes, after
the large ones and after the large ones twice more: memory is flat when the last large round leaves each
within 2 MiB of the round before it (the first large rounds may raise it: bounded caches fill, the
allocator's high-water mark). The goal: the time per run, item or step at each large size within 1.5x of
the small. Prints one table (`make bench` runs it after `bench goals`) and writes it as JSON
(`bench/growth.json`, or `--json PATH`). Run: `.venv/bin/python -m bench growth [--only
runs|foreach|steps] [--large-rounds N]` (root; needs the node's base template; ~7 minutes on 2 cores;
N large rounds, 3 by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.burst import cpu_seconds
from bench.procstats import rss_mib
from bench.routinestack import REPO, routine_stack
from telemetry.arenas import GIVE_BACK_EVERY_S

GROWTH_SETTINGS = {
    "B3OS_RUNS_PER_ORG": "1000",
    "B3OS_RUN_STARTS_PER_MINUTE": "1000",
    "B3OS_STARTS_PER_MINUTE": "100000",
    "B3OS_ROUTINE_BURST": "100000",
}
"""The per-organization limits lifted for the bench: it measures what the engine costs, not the limits."""

SIZES = {"runs": (100, 1000), "foreach": (100, 1000), "steps": (20, 200)}
UNITS = {
    "runs": "one-step runs of 25 orgs at once, per run",
    "foreach": "a foreach of free noop calls, per item",
    "steps": "steps each needing the one before, per step",
}
MOST_ITEMS = 10_000
"""A foreach's most items (`engine.runs.FOREACH_MAX_ITEMS`), run once after the rounds."""
GOAL_RATIO = 1.5
MEMORY_SLACK_MIB = 2
"""Memory is flat when the last large round leaves each process (each api process on its own) within this
of the round before it (the first large rounds may raise it: bounded caches fill, such as the worker's
1,000 cached runs)."""
SETTLE_S = GIVE_BACK_EVERY_S + 2
"""After each round, before its RSS is read: the processes settle (their last calls' answers sent, runs
forgotten) and give back what the round freed (`telemetry.arenas.giving_back`)."""


def _one_step(free: str) -> str:
    return f"name: one\nsteps:\n  - id: a\n    uses: {free}/noop@1\n    with: {{}}\n"


def _foreach(free: str) -> str:
    return (
        "name: many\ninputs:\n  items: {type: array}\nsteps:\n  - id: each\n"
        f"    uses: {free}/noop@1\n    foreach: ${{{{ inputs.items }}}}\n    with: {{}}\n"
    )


def _steps(free: str, count: int) -> str:
    steps = "".join(f"  - id: s{i}\n    uses: {free}/noop@1\n    with: {{}}\n" for i in range(count))
    return f"name: long-{count}\nsteps:\n{steps}"


def _rss(stack: Any) -> dict[str, float]:
    """The RSS of each api process, worker and node, by its name in the stack, MiB."""
    kinds = ("api-", "worker", "node-")
    return {
        proc.name: rss_mib(proc.popen.pid)
        for proc in stack.procs
        if proc.name.startswith(kinds) and proc.popen.poll() is None
    }


async def _history_size(stack: Any, run_id: str, name: str) -> tuple[int, int]:
    """The events and bytes of the largest history of the run and its foreach chunks' child workflows."""
    workflow_id = f"routine-{name}-{run_id}"
    events = await stack.history(workflow_id)
    histories = [events]
    for event in events:
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            child = event.start_child_workflow_execution_initiated_event_attributes.workflow_id
            histories.append(await stack.history(child))
    largest = max(histories, key=len)
    return len(largest), sum(e.ByteSize() for e in largest)


async def _runs(stack: Any, count: int) -> float:
    """Seconds per run of `count` one-step runs of 25 organizations started at once."""
    from calls.stack import FREE

    orgs = [stack.runner() for _ in range(25)]
    for org in orgs:
        assert (await stack.store(org, _one_step(FREE))).status_code == 201
    began = time.perf_counter()
    run_ids = await asyncio.gather(*(stack.start_run(orgs[i % 25], "one") for i in range(count)))
    ends = await asyncio.gather(
        *(stack.final(orgs[i % 25], r, timeout_s=1800) for i, r in enumerate(run_ids))
    )
    took = time.perf_counter() - began
    assert all(run["status"] == "succeeded" for run in ends), [r for r in ends if r["status"] != "succeeded"]
    return took / count


async def _one_run(stack: Any, source: str, name: str, inputs: dict[str, Any]) -> tuple[float, int, int]:
    """Seconds of one run of `source` to its end, and its history's events and bytes."""
    org = stack.runner()
    assert (await stack.store(org, source)).status_code == 201
    began = time.perf_counter()
    run_id = await stack.start_run(org, name, inputs)
    run = await stack.final(org, run_id, timeout_s=3600)
    took = time.perf_counter() - began
    assert run["status"] == "succeeded", run
    return (took, *await _history_size(stack, run_id, name))


async def _bench(stack: Any, only: set[str], large_rounds: int, results: dict[str, Any]) -> None:
    from calls.stack import FREE

    rss: dict[str, dict[str, float]] = {"at rest": _rss(stack)}
    results["rss_mib"] = rss
    rounds = [("small", 0), ("large", 1)] + [(f"large {n}", 1) for n in range(2, large_rounds + 1)]
    for round_name, size in rounds:
        if "runs" in only:
            count = SIZES["runs"][size]
            before = cpu_seconds()
            took = await _runs(stack, count)
            used = cpu_seconds()
            cpu_ms = {
                kind: round((used[kind] - before.get(kind, 0.0)) * 1000 / count, 1) for kind in sorted(used)
            }
            _add(results, "runs", count, took, None, cpu_ms=cpu_ms)
        if "foreach" in only:
            count = SIZES["foreach"][size]
            took, events, size_b = await _one_run(
                stack, _foreach(FREE), "many", {"items": list(range(count))}
            )
            _add(results, "foreach", count, took / count, (events, size_b))
        if "steps" in only:
            count = SIZES["steps"][size]
            took, events, size_b = await _one_run(stack, _steps(FREE, count), f"long-{count}", {})
            _add(results, "steps", count, took / count, (events, size_b))
        await asyncio.sleep(SETTLE_S)
        rss[round_name] = _rss(stack)
        print(f"{round_name} round done", flush=True)
    if "foreach" in only:
        took, events, size_b = await _one_run(stack, _foreach(FREE), "many", {"items": list(range(10_000))})
        await asyncio.sleep(SETTLE_S)
        rss[f"after {MOST_ITEMS:,} items"] = _rss(stack)
        _add(results, "foreach", MOST_ITEMS, took / MOST_ITEMS, (events, size_b))


def _add(
    results: dict[str, Any],
    work: str,
    count: int,
    seconds: float,
    history: tuple[int, int] | None,
    *,
    cpu_ms: dict[str, float] | None = None,
) -> None:
    """One measured size of a work: seconds per unit, the largest history's events and bytes, and the CPU
    a unit took in each kind of process."""
    row: dict[str, Any] = {"count": count, "ms_per_unit": round(seconds * 1000, 2)}
    if history is not None:
        row["history_events"], row["history_bytes"] = history
    if cpu_ms is not None:
        row["cpu_ms"] = cpu_ms
    results.setdefault(work, []).append(row)


def print_table(results: dict[str, Any]) -> None:
    """Item 3's table: each work at its small and large sizes, per unit, against the goal; then memory."""
    print(f"{'work':<45}{'small':<16}{'large (rounds)':<42}{'large / small':<28}{'target':<10}met")
    for work, (small, _) in SIZES.items():
        rows = results.get(work, [])
        smalls = [r for r in rows if r["count"] == small]
        larges = [r for r in rows if r["count"] != small]
        if not smalls or not larges:
            continue
        base = smalls[0]["ms_per_unit"]
        ratios = [r["ms_per_unit"] / base for r in larges]
        sizes = "; ".join(
            f"{count:,}: " + ", ".join(f"{r['ms_per_unit']:.1f}" for r in larges if r["count"] == count)
            for count in dict.fromkeys(r["count"] for r in larges)
        )
        times = ", ".join(f"{x:.2f}x" for x in ratios)
        met = "yes" if max(ratios) <= GOAL_RATIO else "NO"
        print(
            f"{UNITS[work]:<45}{f'{small:,}: {base:.1f} ms':<16}{sizes:<42}{times:<28}"
            f"{f'<= {GOAL_RATIO}x':<10}{met}"
        )
        if all("cpu_ms" in r for r in rows):
            kinds = [k for k in rows[0]["cpu_ms"] if any(r["cpu_ms"][k] for r in rows)]
            each = "; ".join(f"{k} " + ", ".join(f"{r['cpu_ms'][k]:.1f}" for r in rows) for k in kinds)
            print(f"  CPU a run, ms (small, then each large round): {each}")
        history = max(larges, key=lambda r: r.get("history_events", 0))
        if "history_events" in history:
            print(
                f"  the largest history at {history['count']:,}: {history['history_events']:,} events, "
                f"{history['history_bytes'] / 1024:.0f} KiB"
            )
    rss = results.get("rss_mib", {})
    rounds = [r for r in rss if r.startswith("large")]
    for name in rss.get("at rest", {}):
        after = ", ".join(f"{r} {m[name]:.0f}" for r, m in rss.items() if name in m)
        if len(rounds) < 2:
            print(f"RSS {name}, MiB: {after}")
            continue
        grew = rss[rounds[-1]][name] - rss[rounds[-2]][name]
        flat = "yes" if grew <= MEMORY_SLACK_MIB else "NO"
        print(f"RSS {name}, MiB: {after}; the last large round {grew:+.0f} (<= {MEMORY_SLACK_MIB}): {flat}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench growth")
    parser.add_argument("--only", action="append", choices=sorted(SIZES), help="a part (repeatable)")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "growth.json", help="where to write")
    parser.add_argument("--large-rounds", type=int, default=3, help="rounds at the large sizes (at least 2)")
    args = parser.parse_args(argv)
    if args.large_rounds < 2:
        parser.error(f"--large-rounds {args.large_rounds}: at least 2 (memory is read across the last two)")
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engine")]

    from realstack import RoutineStack

    stack_env = RoutineStack.env

    def env(self: Any, **extra: str) -> dict[str, str]:
        return stack_env(self, **{**GROWTH_SETTINGS, **extra})

    RoutineStack.env = env  # type: ignore[method-assign]

    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    async def run() -> None:
        async with routine_stack("growth") as stack:
            await _bench(stack, set(args.only or SIZES), args.large_rounds, results)

    try:
        asyncio.run(run())
    finally:  # what was measured before a failure is still worth its table
        print_table(results)
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
