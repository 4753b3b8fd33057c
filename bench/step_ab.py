"""Two routine workers side by side: the same one-step run on each, alternated, in one run.

Starts the routine stack of bench/goals.py and two more worker processes, A and B, each on a task
queue of its own, each with its own environment (`--a-env`/`--b-env K=V`) and, optionally, its own
source tree (`--a-tree`/`--b-tree DIR`: an export of another commit, e.g. `git worktree add` or
`git archive | tar -x`), so a worker-side change is measured against its baseline under the same
load. Each round starts one run on A and one on B (which goes first alternates) straight in Temporal,
with a grant minted as the api mints one, and waits for its result; both workers call the first
api. The figures come from each run's history (see bench/step_calls.py).

Run: `.venv/bin/python -m bench step_ab --runs 40 --b-env B3OS_X=1` (root).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from bench.procstats import p50, p95
from bench.routinestack import REPO, routine_stack
from bench.step_calls import _history_ms


def _start_worker(stack: Any, name: str, queue: str, env: list[str], tree: Path | None) -> Any:
    from calls.stack import Proc

    extra = dict(item.split("=", 1) for item in env)
    full = stack.env(B3OS_API_URL=stack.url, B3OS_TEMPORAL_TASK_QUEUE=queue, **extra)
    log = stack.root / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "engine.worker"],
            env=full,
            cwd=tree or REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    proc = Proc(name, popen, log)
    stack.procs.append(proc)
    stack.wait_polling(proc)
    return proc


async def _rounds(stack: Any, args: argparse.Namespace) -> dict[str, list[float]]:
    from calls.stack import FREE

    from engine.runs import WORKFLOW_TYPE, RunRoutineInput
    from engine.validate import load_routine

    routine = load_routine(f"name: one\nsteps:\n  - id: a\n    uses: {FREE}/noop@1\n    with: {{}}\n")
    queues = {"A": f"bench-a-{uuid.uuid4().hex[:8]}", "B": f"bench-b-{uuid.uuid4().hex[:8]}"}
    _start_worker(stack, "worker-A", queues["A"], args.a_env, args.a_tree)
    _start_worker(stack, "worker-B", queues["B"], args.b_env, args.b_tree)
    client = stack.temporal_client
    out: dict[str, list[float]] = {}
    org = stack.runner()
    for i in range(args.runs + 3):
        if i % 25 == 0:
            org = stack.runner()  # an organization starts at most 120 calls a minute
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for side in order:
            workflow_id = f"routine-bench-{uuid.uuid4().hex}"
            run_input = RunRoutineInput(
                routine=routine,
                org_id=org.org_id,
                key_id=org.key_id,
                run_id=f"run_{uuid.uuid4().hex[:20]}",
                pins={f"{FREE}/noop@1": f"{FREE}/noop@1.0.0"},
                grant=stack.grant(org, workflow_id=workflow_id),
            )
            handle = await client.start_workflow(
                WORKFLOW_TYPE, run_input, id=workflow_id, task_queue=queues[side]
            )
            await handle.result()
            phases = _history_ms(await stack.history(workflow_id))
            phases.pop("_act_started"), phases.pop("_act_completed")
            if i >= 3:  # warm-up: each worker's first runs import and compile
                for name, value in phases.items():
                    out.setdefault(f"{name} {side}", []).append(value)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench step_ab")
    parser.add_argument("--runs", type=int, default=40, help="rounds timed (a run on each worker)")
    parser.add_argument("--a-env", action="append", default=[], help="K=V for worker A")
    parser.add_argument("--b-env", action="append", default=[], help="K=V for worker B")
    parser.add_argument("--a-tree", type=Path, help="worker A's source tree (default: this one)")
    parser.add_argument("--b-tree", type=Path, help="worker B's source tree (default: this one)")
    args = parser.parse_args(argv)

    async def run() -> dict[str, list[float]]:
        async with routine_stack("ab") as stack:
            return await _rounds(stack, args)

    out = asyncio.run(run())
    names = sorted({name.rsplit(" ", 1)[0] for name in out})
    head = f"ms ({args.runs} rounds)"
    print(f"{head:<24}{'A p50':>8}{'B p50':>8}{'B/A':>7}{'A p95':>8}{'B p95':>8}")
    for name in names:
        a, b = out[f"{name} A"], out[f"{name} B"]
        ratio = p50(b) / p50(a) if p50(a) else float("nan")
        print(f"{name:<24}{p50(a):8.1f}{p50(b):8.1f}{ratio:7.2f}{p95(a):8.1f}{p95(b):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
