"""The performance goals (issues 14 and 36), each measured side by side with its floor in one run, printed as
one table and written as JSON (`bench/results.json`, or `--json PATH`).

Starts the routine tests' stack (tests/realstack.py: a Temporal dev server keeping its state in SQLite as
`b3os dev` does, WAL and `synchronous=normal`; two api processes on one SQLite file, a node with bwrap
VMs, the egress proxy in front of HTTPS stand-ins, a routine worker), a second, in-memory dev server for
the Temporal floors, and
measures, interleaving each figure with its floor so that noise from other work on the machine falls
on both:

- noop: the echo tool's `noop` script run bare (`subprocess.run`, the floor), `POST /v1/node/calls` to
  the node itself, `POST /v1/actions/call`, and the same through a bare FastAPI app that only passes
  the call on to the node (`bench.api_floor`: the api's floor), each a lone call made 50 ms after the
  last one ended (`goals_calls.LONE_AFTER_S`); the api's, the floor's and the node's own CPU per call
  (/proc, the goals; the node's split into its VM pool's threads and the rest), over the same calls
  made back to back; the api's share of the time is the request minus the node's phases
  (start..delete), so it holds the api's work, both HTTP hops and the node's HTTP layer;
- calls per second, 8 in flight: straight to the node vs. through the api (2 organizations x 4 over
  the 2 api processes);
- echo with a 6-byte file vs. echo without one (and the same two without the tool's own `run` phase);
- HTTP actions: a direct GET of the stand-in vs. the runtime and proxy phases of the same action call;
- a routine step's Temporal share: a one-step run's time minus its activity's own time (history), each
  run waited for by Temporal's long poll, interleaved with the same share of workflows of the bare SDK
  whose one activity does nothing (`bench.temporal_floor`), on the same server (the goal's floor) and
  on the in-memory one;
- 100 one-step routines of 25 organizations started at once: until the last has ended, beside 100
  workflows of the bare SDK whose one activity does nothing, on both servers;
- 3 routines of one organization, each a foreach of 4 items of a 2 s tool, started together;
- resident memory of the api processes, the node and the worker at rest, after 5,000 and 10,000 calls.

`--profile` also records py-spy collapsed stacks of the api and the node during the noop calls
(bench/profiles/*.txt, one line per stack: `frame;frame;... count`) and prints their hottest frames.

Run: `.venv/bin/python -m bench goals [--calls N] [--memory-calls N] [--profile]` (root).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.goals_calls import bench_calls, bench_http, bench_memory
from bench.goals_routines import bench_routines
from bench.goals_table import print_table
from bench.routinestack import REPO


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench goals")
    parser.add_argument("--calls", type=int, default=200, help="calls per latency figure (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each rate and burst (default 3)")
    parser.add_argument("--routine-runs", type=int, default=30, help="one-step runs timed (default 30)")
    parser.add_argument("--memory-calls", type=int, default=10_000, help="calls for the RSS figure")
    parser.add_argument(
        "--skip", action="append", default=[], choices=("calls", "http", "routines", "memory")
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (a temp dir)")
    parser.add_argument("--profile", action="store_true", help="py-spy the api and the node (bench/profiles)")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results.json", help="where to write")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "egress")]
    import calls.stack
    from calls.stack import free_port
    from realstack import start_routine_stack

    calls.stack.ROUTINE_ADMISSION_WAIT_S = None  # the api's default, not the tests' 429-at-once
    from temporalio.common import SearchAttributeKey
    from temporalio.testing import WorkflowEnvironment

    from engine.converter import DATA_CONVERTER
    from engine.temporal_server import dev_server_args, durable_args

    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    async def run() -> None:
        temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
        metrics_port = free_port()
        root = Path(tempfile.mkdtemp(prefix="b3os-bench-goals-"))
        durable = durable_args(str(root / "temporal.db"))  # as `b3os dev` keeps its runs
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal,
            data_converter=DATA_CONVERTER,
            search_attributes=[SearchAttributeKey.for_keyword(n) for n in ("B3osRoutine", "B3osOrg")],
            dev_server_extra_args=["--metrics-port", str(metrics_port), *durable, *dev_server_args()],
        )
        memory = await WorkflowEnvironment.start_local(  # the second floor: nothing written to disk
            dev_server_existing_path=temporal, dev_server_extra_args=dev_server_args()
        )
        stack = start_routine_stack(root, env)
        stack.temporal_metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        try:
            procs = {
                p.name: p.popen.pid for p in stack.procs if p.name.startswith(("api-", "node-a", "worker"))
            }
            results["processes"] = procs
            if "calls" not in args.skip:
                profile_dir = REPO / "bench" / "profiles" if args.profile else None
                await asyncio.to_thread(bench_calls, stack, args, results, profile_dir)
            if "http" not in args.skip:
                await asyncio.to_thread(bench_http, stack, args, results)
            if "routines" not in args.skip:
                await bench_routines(stack, args, results, memory.client)
            if "memory" not in args.skip:
                await asyncio.to_thread(bench_memory, stack, args, results, procs)
            if args.keep_logs:
                kept = Path(tempfile.mkdtemp(prefix="b3os-bench-logs-"))
                for proc in stack.procs:
                    shutil.copy(proc.log, kept / proc.log.name)
                print(f"logs kept in {kept}")
        except BaseException:
            kept = Path(tempfile.mkdtemp(prefix="b3os-bench-logs-"))
            for proc in stack.procs:  # what the processes said, before their files go
                shutil.copy(proc.log, kept / proc.log.name)
                print(f"--- {proc.name} log, last lines:\n{proc.log.read_text(errors='replace')[-3000:]}")
            print(f"logs kept in {kept}")
            raise
        finally:
            stack.stop()
            await env.shutdown()
            await memory.shutdown()
            shutil.rmtree(root, ignore_errors=True)

    try:
        asyncio.run(run())
    finally:  # what was measured before a failure is still worth its table
        print_table(results)
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
