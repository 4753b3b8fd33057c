"""Where a routine step's time goes, beside the same call made over HTTP, interleaved in one run.

Starts the routine stack of bench/goals.py (tests/realstack.py) and, each round, makes:

- `http`: the free noop over `POST /v1/actions/call` with the org's key (the floor), and
  `http_with_key` the same with an Idempotency-Key (its claim and stored answer);
- `step-shaped`: the same call as a step's activity sends it (worker token, a run's grant, its step and
  the step's Idempotency-Key), from this process: the api's own cost of a routine call;
- a one-step run of that noop, taken apart from its Temporal history: the workflow tasks (waiting for
  the worker, and in it), the activity (eager start to completion) and, from the api's `action_calls`
  row, the call's admission to its finish (and the same split of both HTTP calls: request to
  admission, admission to finish, finish to answer; the clocks are one machine's).

`--wait` says how a run is waited for, and may be given more than once (each round then runs one of
each): `poll` (default) as a client of the api waits, `GET /v1/runs/{id}` every 100 ms on the worker's
api (each poll of a running run is a describe and a `progress` query: work for the api, Temporal and
the worker while the step runs); `poll-other` the same on the other api; `result` Temporal's long
poll. `--profile` records py-spy collapsed stacks of the first api (the worker's) and the worker
during the runs (bench/profiles/stepcalls-*.txt; `--native` adds native frames, and slows every
sampled process several times) and prints their hottest frames.

Run: `.venv/bin/python -m bench step_calls [--runs N] [--wait result] [--profile]` (root).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from typing import Any

import httpx

from bench.procstats import p50, p95
from bench.profiler import Profiler
from bench.routinestack import REPO, routine_stack


def _history_ms(events: list[Any]) -> dict[str, float]:
    """The phases of a one-step run, in ms, from its history events."""
    from temporalio.api.enums.v1 import EventType as E

    t: dict[str, list[float]] = {}
    for e in events:
        t.setdefault(E.Name(e.event_type), []).append(e.event_time.ToMicroseconds() / 1000)
    wft_s, wft_b, wft_c = (
        t["EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"],
        t["EVENT_TYPE_WORKFLOW_TASK_STARTED"],
        t["EVENT_TYPE_WORKFLOW_TASK_COMPLETED"],
    )
    act_s = t["EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"][0]
    act_b = t["EVENT_TYPE_ACTIVITY_TASK_STARTED"][0]
    act_c = t["EVENT_TYPE_ACTIVITY_TASK_COMPLETED"][0]
    start = t["EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"][0]
    end = t["EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"][0]
    return {
        "run": end - start,
        "activity": act_c - act_b,
        "share": (end - start) - (act_c - act_b),
        "wft_wait": sum(b - s for s, b in zip(wft_s, wft_b, strict=False)),
        "wft_work": sum(c - b for b, c in zip(wft_b, wft_c, strict=False)),
        "act_sched_to_start": act_b - act_s,
        "act_done_to_wft": wft_s[-1] - act_c,
        "_act_started": act_b,
        "_act_completed": act_c,
    }


async def _rounds(stack: Any, args: argparse.Namespace) -> dict[str, list[float]]:
    from calls.calltest import step_headers
    from calls.stack import FREE
    from sqlmodel import Session, col, select

    from api.calls.tables import ActionCall

    one = f"name: one\nsteps:\n  - id: a\n    uses: {FREE}/noop@1\n    with: {{}}\n"
    body = {"ref": f"{FREE}/noop@1", "input": {}}
    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:

        def last_call(org: Any, surface: str) -> ActionCall:
            with Session(stack.engine) as session:
                call = session.exec(
                    select(ActionCall)
                    .where(col(ActionCall.org_id) == org.org_id, col(ActionCall.surface) == surface)
                    .order_by(col(ActionCall.started_at).desc())
                ).first()
            assert call is not None and call.finished_at is not None
            return call

        def ms(at: Any) -> float:
            return float(at.timestamp() * 1000)

        async def timed(org: Any, headers: dict[str, str], name: str) -> dict[str, float]:
            began, wall = time.perf_counter(), time.time() * 1000
            r = await http.post("/v1/actions/call", json=body, headers=headers)
            took = (time.perf_counter() - began) * 1000
            assert r.status_code == 200, r.text
            call = last_call(org, "routine" if name == "step_shaped" else "http")
            return {
                name: took,
                f"{name}: to admitted": ms(call.started_at) - wall,
                f"{name}: admitted to finished": ms(call.finished_at) - ms(call.started_at),
                f"{name}: finished to answered": wall + took - ms(call.finished_at),
            }

        profiler = None
        for i in range(args.runs + 3):
            warm = i < 3
            if i == 3 and args.profile:
                first_api = "api-" + stack.url.rsplit(":", 1)[1].strip("/")
                pids = {p.name: p.popen.pid for p in stack.procs if p.name == first_api}
                pids.update({p.name: p.popen.pid for p in stack.procs if p.name.startswith("worker")})
                profiler = Profiler(REPO / "bench" / "profiles", pids, "stepcalls", native=args.native)
            org = stack.runner()  # a fresh one each round: an organization starts at most 60 runs a minute
            stored = await stack.store(org, one)
            assert stored.status_code == 201, stored.text
            found = await timed(org, org.headers, "http")
            keyed = {**org.headers, "Idempotency-Key": f"bench-{uuid.uuid4().hex}"}
            found.update(await timed(org, keyed, "http_with_key"))
            headers = step_headers(stack, org, f"routine-bench-{uuid.uuid4().hex}", "a")
            found.update(await timed(org, headers, "step_shaped"))
            for wait in args.wait:
                if wait != "result":  # as a client of the api waits: GET /v1/runs/{id} every 100 ms
                    run_id = await stack.start_run(org, "one", {})
                    where = stack.api_urls[-1] if wait == "poll-other" else None
                    run = await stack.final(org, run_id, url=where, timeout_s=60)
                    assert run["status"] == "succeeded", run
                    workflow_id = run["workflow_id"]
                else:  # Temporal's long poll for the result: nothing else runs in the stack meanwhile
                    r = await http.post("/v1/routines/one/runs", json={"inputs": {}}, headers=org.headers)
                    assert r.status_code == 201, r.text
                    workflow_id = r.json()["workflow_id"]
                    await stack.temporal_client.get_workflow_handle(workflow_id).result()
                phases = _history_ms(await stack.history(workflow_id))
                call = last_call(org, "routine")
                phases["activity: to admitted"] = ms(call.started_at) - phases.pop("_act_started")
                phases["activity: admitted to finished"] = ms(call.finished_at) - ms(call.started_at)
                done = phases.pop("_act_completed")
                phases["activity: finished to completed"] = done - ms(call.finished_at)
                found.update({f"{wait}: {name}": value for name, value in phases.items()})
            if warm:
                continue
            for name, value in found.items():
                out.setdefault(name, []).append(value)
        if profiler is not None:
            profiler.stop()
            profiler.summary(top=args.top)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench step_calls")
    parser.add_argument("--runs", type=int, default=30, help="rounds timed (default 30)")
    parser.add_argument("--profile", action="store_true", help="py-spy the first api and the worker")
    parser.add_argument(
        "--wait",
        action="append",
        choices=("poll", "poll-other", "result"),
        help="how a run is waited for: poll the worker's api (default), the other api, or Temporal's result",
    )
    parser.add_argument("--native", action="store_true", help="py-spy --native (slows the processes)")
    parser.add_argument("--top", type=int, default=25, help="frames printed per profile")
    args = parser.parse_args(argv)
    args.wait = args.wait or ["poll"]

    async def run() -> dict[str, list[float]]:
        async with routine_stack("steps") as stack:
            return await _rounds(stack, args)

    out = asyncio.run(run())
    print(f"{'ms (' + str(args.runs) + ' rounds)':<40}{'p50':>8}{'p95':>8}")
    for name, values in out.items():
        print(f"{name:<40}{p50(values):8.1f}{p95(values):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
