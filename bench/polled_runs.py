"""CPU per polled run: what a client polling `GET /v1/runs/{id}` costs the stack while a step runs.

Starts the routine stack of bench/goals.py, runs a one-step routine whose step sleeps `--sleep-s`
seconds `--runs` times, one after another, each waited for as a client of the api waits (`GET
/v1/runs/{id}` every 100 ms), and prints the CPU time (user + system, from /proc) each process used
per run: the api processes, the routine worker and the Temporal dev server. CPU time is less at the
mercy of other work on the machine than wall time.

Run: `.venv/bin/python -m bench polled_runs [--runs N] [--sleep-s S]` (root).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from bench.routinestack import routine_stack


def cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def _measure(stack: Any, args: argparse.Namespace) -> dict[str, float]:
    from calls.stack import FREE

    source = (
        f"name: slow\nsteps:\n  - id: a\n    uses: {FREE}/fail@1\n"
        f"    with: {{mode: sleep, seconds: {args.sleep_s}}}\n"
    )
    org = stack.runner()
    assert (await stack.store(org, source)).status_code == 201
    pids = {p.name: p.popen.pid for p in stack.procs if p.name.startswith(("api-", "worker"))}
    for pid in _children(os.getpid()):
        if b"temporal" in Path(f"/proc/{pid}/cmdline").read_bytes():
            pids["temporal"] = pid
    await stack.final(org, await stack.start_run(org, "slow", {}))  # warm-up
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    for _ in range(args.runs):
        run = await stack.final(org, await stack.start_run(org, "slow", {}))
        assert run["status"] == "succeeded", run
    return {name: (cpu_s(pid) - before[name]) / args.runs * 1000 for name, pid in pids.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench polled_runs")
    parser.add_argument("--runs", type=int, default=10, help="runs measured (default 10)")
    parser.add_argument("--sleep-s", type=int, default=1, help="seconds the step sleeps (default 1)")
    args = parser.parse_args(argv)

    async def run() -> dict[str, float]:
        async with routine_stack("polled") as stack:
            return await _measure(stack, args)

    used = asyncio.run(run())
    print(f"CPU ms per polled run ({args.runs} runs, a step of {args.sleep_s} s):")
    for name, ms in used.items():
        print(f"  {name:<24}{ms:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
