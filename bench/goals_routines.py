"""The goals' routines (`bench goals`): a routine step's Temporal share and bursts of runs, each beside the
bare Temporal SDK's workflows of `bench.temporal_floor` (`Floor`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import httpx

from bench import burst
from bench.goals_calls import floor_node_env
from bench.procstats import p50
from bench.profiler import Profiler
from bench.routinestack import REPO


def _step_times(events: list[Any]) -> tuple[float, float, float]:
    """A one-step run's time, its activities' own time and its workflow tasks' time (ms), from its
    history."""
    from temporalio.api.enums.v1 import EventType

    at: dict[str, float] = {}
    act_ms = task_ms = 0.0
    started: dict[int, float] = {}
    for e in events:
        t = e.event_time.ToMicroseconds() / 1000
        kind = e.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            at["start"] = t
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            at["end"] = t
        elif kind in (EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED):
            started[e.event_id] = t
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            act_ms += t - started[e.activity_task_completed_event_attributes.started_event_id]
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task_ms += t - started[e.workflow_task_completed_event_attributes.started_event_id]
    return at["end"] - at["start"], act_ms, task_ms


async def _step_share(
    stack: Any, org: Any, name: str, runs: int, floors: dict[str, tuple[Floor, bool]], out: dict[str, Any]
) -> None:
    """`runs` one-step runs of routine `name`, one after the other, each waited for by Temporal's long poll
    of its result (a client polling `GET /v1/runs/{id}` adds its reads to the run: `bench step_calls`),
    each followed by one workflow of each floor (`floors`: a floor, and whether its activity calls the
    node)."""
    from engine.runs import routine_workflow_id

    rows: dict[str, list[float]] = {
        k: [] for k in ("run", "activity", "share", "tasks", *floors, *(f"{f}_tasks" for f in floors))
    }
    for i in range(runs + 2):
        for floor_name, (floor, node) in floors.items():
            ms, task_ms = await floor.share(node=node)
            if i >= 2:
                rows[floor_name].append(ms)
                rows[f"{floor_name}_tasks"].append(task_ms)
        run_id = await stack.start_run(org, name, {})
        handle = stack.temporal_client.get_workflow_handle(routine_workflow_id(name, run_id))
        result = await handle.result()
        assert result["status"] == "succeeded", result
        total, act_ms, task_ms = _step_times(await stack.history(handle.id))
        if i < 2:
            continue  # warm-up (the worker's first runs import and compile)
        rows["run"].append(total)
        rows["activity"].append(act_ms)
        rows["share"].append(total - act_ms)
        rows["tasks"].append(task_ms)
    out["step_run_ms"] = p50(rows["run"])
    out["step_activity_ms"] = p50(rows["activity"])
    out["step_temporal_ms"] = p50(rows["share"])
    out["step_workflow_tasks_ms"] = p50(rows["tasks"])
    for floor_name in floors:
        out[f"{floor_name}_step_temporal_ms"] = p50(rows[floor_name])
        out[f"{floor_name}_step_workflow_tasks_ms"] = p50(rows[f"{floor_name}_tasks"])


class Floor:
    """The bare Temporal workflow of `bench.temporal_floor` on the server of `client` (the stack's by
    default), its worker a process of the stack's."""

    def __init__(self, stack: Any, client: Any = None, name: str = "floor") -> None:
        self.client = client or stack.temporal_client
        self.queue = f"{name}-{os.getpid()}"
        address = self.client.service_client.config.target_host
        env = {**os.environ, "PYTHONPATH": str(REPO), **floor_node_env(stack)}
        proc = stack.start(
            f"{name}-worker", [sys.executable, "-m", "bench.temporal_floor", address, self.queue], env
        )
        stack.wait_polling(proc)
        self.count = 0

    async def start(self, *, node: bool = False) -> Any:
        """One workflow; with `node`, the one whose activity calls the node (`FloorNodeWorkflow`)."""
        from bench.temporal_floor import FloorNodeWorkflow, FloorWorkflow

        self.count += 1
        run = FloorNodeWorkflow.run if node else FloorWorkflow.run
        return await self.client.start_workflow(
            run, self.count, id=f"floor-{self.queue}-{self.count}", task_queue=self.queue
        )

    async def share(self, *, node: bool = False) -> tuple[float, float]:
        """The Temporal share (ms) of one workflow, waited for, as `_step_share` takes a run's, and its
        workflow tasks' time (ms)."""
        handle = await self.start(node=node)
        await handle.result()
        total, act_ms, task_ms = _step_times([e async for e in handle.fetch_history_events()])
        return total - act_ms, task_ms

    async def burst(self, count: int, *, node: bool = False) -> float:
        """Seconds until `count` workflows started at once have all ended."""
        began = time.perf_counter()
        handles = await asyncio.gather(*(self.start(node=node) for _ in range(count)))
        await asyncio.gather(*(h.result() for h in handles))
        return time.perf_counter() - began


async def _burst(
    stack: Any,
    orgs: list[Any],
    name: str,
    per_org: int,
    starts_s: list[float],
    refused: list[int],
    where: dict[str, Any] | None = None,
) -> float:
    """Start `per_org` runs of each organization at once; seconds until every one has ended (`where`:
    filled with where the time went, `bench.burst`)."""
    from temporalio.client import WorkflowFailureError

    client = stack.temporal_client
    metrics_url = getattr(stack, "temporal_metrics_url", None)
    cpu_before, began_wall = burst.cpu_seconds(), time.time()
    temporal_before = burst.temporal_operations(metrics_url)
    began = time.perf_counter()
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:

        async def start(org: Any) -> str | None:
            r = await http.post(f"/v1/routines/{name}/runs", json={"inputs": {}}, headers=org.headers)
            if r.status_code != 201:
                print(f"  a run did not start: {r.status_code} {r.text[:200]}")
                refused.append(r.status_code)
                return None
            return str(r.json()["workflow_id"] if "workflow_id" in r.json() else r.json()["run_id"])

        started = await asyncio.gather(*(start(o) for o in orgs for _ in range(per_org)))
    starts_s.append(time.perf_counter() - began)
    ids = [s if s.startswith("routine-") else f"routine-{name}-{s}" for s in started if s is not None]

    async def done(wid: str) -> None:
        try:
            await client.get_workflow_handle(wid).result()
        except WorkflowFailureError as exc:
            raise AssertionError(f"{wid} failed: {exc.cause}") from None

    await asyncio.gather(*(done(w) for w in ids))
    took = time.perf_counter() - began
    if where is not None:
        where.update(
            await burst.where_time_went(stack, ids, began_wall, cpu_before, temporal_before, metrics_url)
        )
    return took


async def bench_routines(
    stack: Any, args: argparse.Namespace, out: dict[str, Any], memory_client: Any
) -> None:
    from calls.stack import FREE

    one = f"name: one\nsteps:\n  - id: a\n    uses: {FREE}/noop@1\n    with: {{}}\n"
    waits = (
        "name: waits\nsteps:\n  - id: a\n    foreach: ${{ [1, 2, 3, 4] }}\n"
        f"    uses: {FREE}/fail@1\n    with: {{mode: sleep, seconds: 2}}\n"
    )
    org = stack.runner()
    for source in (one, waits):
        stored = await stack.store(org, source)
        assert stored.status_code == 201, stored.text
    profiler = None
    if args.profile:
        pids = {p.name: p.popen.pid for p in stack.procs if p.name.startswith(("api-", "worker"))}
        profiler = Profiler(REPO / "bench" / "profiles", pids, "step")
    floors = {"floor": Floor(stack), "floor_memory": Floor(stack, memory_client, "floor-memory")}
    shares = {
        "floor": (floors["floor"], False),
        "floor_memory": (floors["floor_memory"], False),
        "floor_node": (floors["floor"], True),  # its activity the routine's noop call, straight to the node
    }
    await _step_share(stack, org, "one", args.routine_runs, shares, out)
    if profiler is not None:
        profiler.stop()
        profiler.summary()
    floor = floors["floor"]
    bursts: list[float] = []
    floor_bursts: list[float] = []
    node_bursts: list[float] = []
    memory_bursts: list[float] = []
    starts: list[float] = []
    refused: list[int] = []
    for _ in range(args.rounds):
        orgs = [stack.runner() for _ in range(25)]
        for o in orgs:
            assert (await stack.store(o, one)).status_code == 201
        where: dict[str, Any] = {}
        bursts.append(await _burst(stack, orgs, "one", 4, starts, refused, where))
        out["burst_100_where"] = where  # the last round's
        for name, runs, node in (("floor", floor_bursts, False), ("floor_node", node_bursts, True)):
            cpu_before = burst.cpu_seconds()
            runs.append(await floor.burst(100, node=node))
            out[f"{name}_burst_100_cpu_s"] = burst.cpu_used(cpu_before)  # the last round's
            out[f"{name}_burst_100_wall_s"] = runs[-1]
        memory_bursts.append(await floors["floor_memory"].burst(100))
    out["burst_100_s"] = p50(bursts)
    out["burst_100_started_s"] = p50(starts)
    out["floor_burst_100_s"] = p50(floor_bursts)
    out["floor_node_burst_100_s"] = p50(node_bursts)
    out["floor_memory_burst_100_s"] = p50(memory_bursts)
    out["runs_not_started"] = len(refused)
    out["samples"] = {**out.get("samples", {}), "burst_100_s": bursts}
    waited = []
    for _ in range(max(1, args.rounds - 1)):
        o = stack.runner()
        assert (await stack.store(o, waits)).status_code == 201
        waited.append(await _burst(stack, [o], "waits", 3, [], refused))
    out["waits_3x4x2s_s"] = p50(waited)
    out["samples"] = {**out.get("samples", {}), "waits_3x4x2s_s": waited}
