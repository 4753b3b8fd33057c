"""Fairness between organizations: a small run of one organization beside another's heavy load.

Starts the routine tests' stack (bench/routinestack.py: a Temporal dev server, two api processes, a node,
a routine worker process and the busy lane's) and times a small one-step run (the free echo) of a quiet
organization, run after run (at most one every 1.1 s: the organization's 60 starts a minute), from sending
its start to its workflow's last event (bench/hostile_routines.py `_timed_run`); the stack's limits are the
defaults:

- alone;
- beside `--heavy` (20) heavy but valid runs of a busy organization started at once, again and again
  while the small runs are timed: each a foreach of 60 items whose `with:` costs ~700 evaluation steps,
  every item a call of the free echo (the issue's "20 heavy valid runs"; the organization's 120 calls
  a minute then hold most of them back, answered 429 and retried); once the small runs are timed,
  the heavy runs still going are cancelled;
- beside `--schedules` (300) every-minute schedules of the busy organization (30 routines of 10
  schedules each, one echo step), for `--minutes` (3) minutes: what their ticks start competes with the
  small runs (the busy organization's starts past its limits are answered 429 and retried).

`B3OS_TEMPORAL_*` in the environment (`B3OS_TEMPORAL_WORKFLOW_TASKS`) are the worker's settings,
`B3OS_VM_WEIGHT` and `B3OS_HOST_RESERVE_CPUS` the node's, `B3OS_CALLS_PER_ORG` the api's.
Prints, in ms, the small run's median, 90th and 99th percentile and longest, and the ratios to alone, and
where the time of the slowest tenth and of the slowest run went; the
goal (issue 43) is the small run within 2x of its time alone at the 99th percentile. Run:
`.venv/bin/python -m bench fairness [--rounds N (100)] [--heavy N] [--schedules N] [--minutes M]` (root; needs
the node's base template).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from typing import Any

from bench.hostile_routines import _HostileClient, _phase_text, _phases, _timed_run
from bench.routinestack import REPO, routine_stack

HEAVY_ITEMS = 60
HEAVY_WITH = (
    "${{ string([" + ",".join(str(i) for i in range(120)) + "].map(x, x * 2).filter(x, x > 3).size()) }}"
)
"""~700 evaluation steps: a list of 120 built, mapped and filtered."""


def _heavy_routine() -> str:
    from realstack import FREE_ECHO

    items = ", ".join(str(i) for i in range(HEAVY_ITEMS))
    return (
        "name: heavy\nsteps:\n  - id: each\n"
        f"    uses: {FREE_ECHO}\n    foreach: [{items}]\n    with: {{text: '{HEAVY_WITH}'}}\n"
    )


def _scheduled_routine(i: int, schedules: int) -> str:
    from realstack import FREE_ECHO

    crons = "".join(f"    - cron: '* * * * *'\n      inputs: {{n: {k}}}\n" for k in range(schedules))
    return (
        f"name: ticking-{i}\ninputs:\n  n: {{type: integer, default: 0}}\non:\n  schedule:\n{crons}"
        f"steps:\n  - id: a\n    uses: {FREE_ECHO}\n    with: {{text: tick}}\n"
    )


def _percentiles(samples: list[float]) -> tuple[float, float, float, float]:
    """The median, the 90th and 99th percentiles by nearest rank (the 99th of 100 samples is the second
    longest, not the longest), and the longest."""
    ordered = sorted(samples)
    at = lambda q: ordered[max(0, math.ceil(q * len(ordered)) - 1)]  # noqa: E731
    return statistics.median(ordered), at(0.90), at(0.99), ordered[-1]


def _line(label: str, samples: list[float], alone: list[float] | None = None) -> str:
    p50, p90, p99, top = _percentiles(samples)
    text = f"{label} ({len(samples)} runs): median {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, max {top:.0f}"
    if alone:
        a50, a90, a99, _ = _percentiles(alone)
        text += f"  = {p50 / a50:.1f}x, {p90 / a90:.1f}x, {p99 / a99:.1f}x of alone"
    slowest = sorted(samples)[-max(1, len(samples) // 10) :]
    text += f"\n    the slowest tenth, medians: {_phase_text([PHASES[ms] for ms in slowest])}"
    text += f"\n    the slowest one: {_phase_text([PHASES[slowest[-1]]])}"
    text += "\n    the slowest starts' parts (Server-Timing, ms): " + "; ".join(
        STARTS[ms] for ms in sorted(samples, key=lambda ms: -PHASES[ms][0])[:3]
    )
    return text


PASSED_SETTINGS = ("B3OS_TEMPORAL_", "B3OS_VM_WEIGHT", "B3OS_HOST_RESERVE_CPUS", "B3OS_CALLS_PER_ORG")
"""Settings of the stack's processes taken from the bench's environment (the stack starts each process
without the environment's other `B3OS_` variables)."""

ROUNDS = 100
"""Small runs timed alone and beside the heavy runs: a p99 of fewer than 100 is their longest one."""

SMALL_EVERY_S = 1.1
"""The small runs start at most this often: within the quiet organization's 60 starts a minute."""


PHASES: dict[float, list[float]] = {}
"""Where each small run's time went (bench/hostile_routines.py PHASES), by its latency."""

STARTS: dict[float, str] = {}
"""Where each small run's start went in the api (its answer's Server-Timing), by its latency."""


async def _small_run(stack: Any, org: Any) -> float:
    began = time.monotonic()
    ms, run = await _timed_run(stack, org, "small", {})
    PHASES[ms] = await _phases(stack, org, run)
    STARTS[ms] = run["start_timing"].replace(";dur=", " ")
    await asyncio.sleep(max(0.0, began + SMALL_EVERY_S - time.monotonic()))
    return ms


async def _small_runs(stack: Any, org: Any, count: int) -> list[float]:
    return [await _small_run(stack, org) for _ in range(count)]


async def _beside_heavy(stack: Any, busy: Any, quiet: Any, runs: int, rounds: int) -> list[float]:
    """The small run timed again and again while batches of `runs` heavy runs are in flight."""
    assert (await stack.store(busy, _heavy_routine())).status_code == 201
    client = _HostileClient(stack.url, busy.headers, [("heavy", {})] * runs)
    samples: list[float] = []
    batches = 0
    while len(samples) < rounds:
        client.go()
        ids = await client.run_ids()
        batches += 1
        ends = [asyncio.create_task(stack.final(busy, i, timeout_s=600)) for i in ids]
        while not all(e.done() for e in ends) and len(samples) < rounds:
            samples.append(await _small_run(stack, quiet))
        for run_id in ids:  # enough samples: the batch's runs still going are cancelled
            await asyncio.to_thread(_post, stack, busy, f"/v1/runs/{run_id}/cancel")
        for run in await asyncio.gather(*ends):
            assert run["status"] in ("succeeded", "cancelled"), run
    client.close()
    print(f"  ({batches} batches of {runs} heavy runs of {HEAVY_ITEMS} calls each)")
    return samples


def _post(stack: Any, org: Any, path: str) -> None:
    import loopback

    loopback.post(f"{stack.url}{path}", headers=org.headers, timeout=30)


async def _beside_schedules(stack: Any, busy: Any, quiet: Any, schedules: int, minutes: float) -> list[float]:
    """The small run timed again and again for `minutes` while `schedules` every-minute schedules tick."""
    per_routine = 10
    for i in range(schedules // per_routine):
        stored = await stack.store(busy, _scheduled_routine(i, per_routine))
        assert stored.status_code == 201, stored.text
    samples: list[float] = []
    until = time.monotonic() + minutes * 60
    while time.monotonic() < until:
        samples.append(await _small_run(stack, quiet))
    return samples


async def _bench(stack: Any, args: argparse.Namespace) -> None:
    from test_hostile_routines import one_step

    busy, quiet = stack.runner(), stack.runner()
    assert (await stack.store(quiet, one_step("small", "{text: hi}"))).status_code == 201
    await _small_runs(stack, quiet, 2)  # the first runs compile the routine's expressions
    alone = await _small_runs(stack, quiet, args.rounds)
    print(_line("small run alone", alone))
    if args.heavy:
        heavy = await _beside_heavy(stack, busy, quiet, args.heavy, args.rounds)
        print(_line(f"beside {args.heavy} heavy runs", heavy, alone))
    if args.schedules:
        scheduled = await _beside_schedules(stack, busy, quiet, args.schedules, args.minutes)
        print(
            _line(f"beside {args.schedules} every-minute schedules, {args.minutes:g} min", scheduled, alone)
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench fairness")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"small runs alone and beside heavy (default {ROUNDS})"
    )
    parser.add_argument("--heavy", type=int, default=20, help="heavy runs at once (default 20; 0: none)")
    parser.add_argument(
        "--schedules", type=int, default=300, help="every-minute schedules (default 300; 0: none)"
    )
    parser.add_argument("--minutes", type=float, default=3, help="minutes beside the schedules (default 3)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engine")]

    import os

    from realstack import RoutineStack

    stack_env = RoutineStack.env

    def env(self: Any, **extra: str) -> dict[str, str]:  # the settings given to the bench
        passed = {k: v for k, v in os.environ.items() if k.startswith(PASSED_SETTINGS)}
        return stack_env(self, **{**passed, **extra})

    RoutineStack.env = env  # type: ignore[method-assign]

    async def run() -> None:
        async with routine_stack("fairness") as stack:
            await _bench(stack, args)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
