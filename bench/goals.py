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
  the call on to the node (`bench.api_floor`: the api's floor); the api's, the floor's and the node's
  own CPU per call (/proc, the goals; the node's split into its VM pool's threads and the rest); the
  api's share of the time is the request minus the node's phases (start..delete), so it holds the
  api's work, both HTTP hops and the node's HTTP layer;
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
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench import burst
from bench.api_calls import api_throughput

REPO = Path(__file__).resolve().parent.parent
PHASES = ("start", "copy", "unpack", "run", "collect", "delete")
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool" / "bin" / "echo-tool"
HTTP_BODY = b'{"ok": true, "items": [1, 2, 3]}'


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


def _idle(frames: list[str]) -> bool:
    """A sample of an idle event loop or of a worker thread waiting for work."""
    if any("select" in f and "selectors" in f for f in frames[-2:]) or "epoll" in frames[-1]:
        return True
    return frames[-1].startswith(("Condition.wait (threading", "wait (threading"))


class Profiler:
    """py-spy record of some processes, collapsed stacks, until stopped."""

    def __init__(self, out_dir: Path, pids: dict[str, int], label: str, *, native: bool = False) -> None:
        self.out_dir = out_dir
        self.files: dict[str, Path] = {}
        self.procs: list[subprocess.Popen[bytes]] = []
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            path = out_dir / f"{label}-{name}.txt"
            self.files[name] = path
            self.procs.append(
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "500",
                        "--format",
                        "raw",
                        "--threads",
                        "--output",
                        str(path),
                        *(["--native"] if native else ["--nonblocking"]),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            )
        time.sleep(1.0)  # py-spy attaches

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def summary(self, top: int = 12) -> None:
        """Print the frames with the most samples (self and total) of each profile."""
        for name, path in self.files.items():
            if not path.exists():
                print(f"  profile {name}: none written")
                continue
            own: Counter[str] = Counter()
            total: Counter[str] = Counter()
            samples = 0
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit():
                    continue
                n = int(count)
                frames = stack.split(";")
                if _idle(frames):
                    continue
                samples += n
                own[frames[-1]] += n
                for frame in set(frames):
                    total[frame] += n
            print(f"  profile {name} ({samples} busy samples, {path}):")
            for frame, n in total.most_common(top):
                print(f"    {100 * n / max(samples, 1):5.1f}% total  {frame[:150]}")


# --- the calls: noop, throughput, files, HTTP actions, memory ---------------------------------------


def _node_of(stack: Any) -> tuple[str, int]:
    from sqlmodel import Session, select

    from api.models import Node

    with Session(stack.engine) as session:
        node = session.exec(select(Node)).first()
    assert node is not None
    proc = next(p for p in stack.procs if p.name == "node-a")
    return node.url, proc.popen.pid


def _node_target(stack: Any, node_url: str) -> Any:
    """The node as the api calls it: every request signed with its call key (node.credential)."""
    from api.calls.nodeclient import NodeTarget
    from node.credential import call_key

    return NodeTarget(node_url, "node-a", call_key(stack.node_secret("node-a")))


def _start_api_floor(stack: Any) -> str:
    """Start `bench.api_floor` in front of the stack's node; its URL of `POST /v1/actions/call`."""
    from calls.stack import free_port, wait_http

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), **_floor_node_env(stack)}
    proc = stack.start("api-floor", [sys.executable, "-m", "bench.api_floor", str(port)], env)
    wait_http(f"http://127.0.0.1:{port}/docs", proc)
    return f"http://127.0.0.1:{port}/v1/actions/call"


def _node_post(client: httpx.Client, node: Any, body: dict[str, Any]) -> tuple[float, Any]:
    """`POST /v1/node/calls` signed as the api signs it (the signing is timed too: the api does it)."""
    from api.calls.nodeclient import NODE_CALLS_PATH

    began = time.perf_counter()
    url, content, headers = node.request(NODE_CALLS_PATH, body)
    r = client.post(url, headers=headers, content=content)
    ms = (time.perf_counter() - began) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{url} answered {r.status_code}: {r.text[:300]}")
    return ms, r.json()


def _post(client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    r = client.post(url, headers=headers, json=body)
    ms = (time.perf_counter() - began) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{url} answered {r.status_code}: {r.text[:300]}")
    return ms, r.json()


def _node_body(i: int) -> dict[str, Any]:
    from calls.stack import FREE

    from bench.echo_calls import echo_tool_call

    return echo_tool_call(f"tcall_bench_{os.getpid()}_{i}", FREE, "noop", {})


def bench_calls(stack: Any, args: argparse.Namespace, out: dict[str, Any], profile_dir: Path | None) -> None:
    from calls.stack import FREE

    node_url, _ = _node_of(stack)
    node = _node_target(stack, node_url)
    stdin = json.dumps({"action": "noop", "input": {}, "limits": {}, "call": {"id": "b"}}).encode()
    noop = {"ref": f"{FREE}/noop@1", "input": {}}
    echo = {"ref": f"{FREE}/echo@1", "input": {"text": "hi"}}
    echo_file = {
        "ref": f"{FREE}/echo@1",
        "input": {"text": "hi", "file": {"$bytes": "aGVsbG8K", "name": "a.txt"}},
    }
    call_url = f"{stack.url}/v1/actions/call"
    floor_url = _start_api_floor(stack)
    rows: dict[str, list[float]] = {k: [] for k in (
        "bare", "node", "node_share", "api", "api_node_phases", "api_share", "floor_api", "echo", "echo_file",
        "echo_platform", "echo_file_platform")}  # fmt: skip
    with httpx.Client(timeout=120) as client:
        org = stack.org()
        for i in range(5):  # warm up pools, connections, caches
            _post(client, call_url, org.headers, noop)
            _post(client, call_url, org.headers, echo_file)
            _node_post(client, node, _node_body(-i - 1))
            _post(client, floor_url, {}, noop)
        served = (f"api-{stack.url.rsplit(':', 1)[1]}", "node-a", "api-floor")  # the api, its node, the floor
        pids = {p.name: p.popen.pid for p in stack.procs if p.name in served}
        profiler = None if profile_dir is None else Profiler(profile_dir, pids, "noop")
        api_before, node_before = cpu_split_ms(pids[served[0]]), cpu_split_ms(pids[served[1]])
        floor_before = sum(cpu_split_ms(pids[served[2]]))
        pool_before = pool_cpu_ms(pids[served[1]])
        for i in range(args.calls):
            if i % 25 == 0:
                org = stack.org()  # far from 120 starts a minute
            began = time.perf_counter()
            subprocess.run([str(ECHO_TOOL), "noop"], input=stdin, capture_output=True, check=True)
            rows["bare"].append((time.perf_counter() - began) * 1000)
            ms, result = _node_post(client, node, _node_body(i))
            rows["node"].append(ms)
            rows["node_share"].append(ms - sum(result["timings"].get(p, 0.0) for p in PHASES))
            ms, body = _post(client, call_url, org.headers, noop)
            phases = sum(body["timings"][p] for p in PHASES)
            rows["api"].append(ms)
            rows["api_node_phases"].append(phases)
            rows["api_share"].append(ms - phases)
            rows["floor_api"].append(_post(client, floor_url, {}, noop)[0])
        api_user, api_sys = (b - a for a, b in zip(api_before, cpu_split_ms(pids[served[0]]), strict=True))
        node_user, node_sys = (b - a for a, b in zip(node_before, cpu_split_ms(pids[served[1]]), strict=True))
        out["api_cpu_per_call_ms"] = (api_user + api_sys) / args.calls
        out["api_sys_per_call_ms"] = api_sys / args.calls
        out["floor_api_cpu_per_call_ms"] = (sum(cpu_split_ms(pids[served[2]])) - floor_before) / args.calls
        # the node served each noop three times: straight, through the api and through the floor (its VMs'
        # own CPU not counted)
        out["node_cpu_per_call_ms"] = (node_user + node_sys) / (3 * args.calls)
        out["node_sys_per_call_ms"] = node_sys / (3 * args.calls)
        out["node_pool_cpu_per_call_ms"] = (pool_cpu_ms(pids[served[1]]) - pool_before) / (3 * args.calls)
        if profiler is not None:
            profiler.stop()
            profiler.summary()
        for i in range(args.calls):
            if i % 25 == 0:
                org = stack.org()
            for name, body_in in (("echo", echo), ("echo_file", echo_file)):
                ms, body = _post(client, call_url, org.headers, body_in)
                rows[name].append(ms)
                rows[f"{name}_platform"].append(ms - body["timings"]["run"])
    for name, values in rows.items():
        out.setdefault("samples_ms", {})[name] = {"p50": round(p50(values), 3), "p95": round(p95(values), 3)}
    out["noop_bare_ms"] = p50(rows["bare"])
    out["noop_node_ms"] = p50(rows["node"])
    out["node_share_ms"] = p50(rows["node_share"])
    out["noop_api_ms"] = p50(rows["api"])
    out["noop_floor_api_ms"] = p50(rows["floor_api"])
    out["api_share_ms"] = p50(rows["api_share"])
    out["echo_ms"] = p50(rows["echo"])
    out["echo_file_ms"] = p50(rows["echo_file"])
    out["echo_platform_ms"] = p50(rows["echo_platform"])
    out["echo_file_platform_ms"] = p50(rows["echo_file_platform"])
    _throughput(stack, node, noop, out, args)


def _throughput(
    stack: Any, node: Any, noop: dict[str, Any], out: dict[str, Any],
    args: argparse.Namespace,
) -> None:  # fmt: skip
    per_worker = 12  # 8 x 12 = 96 calls a round: 48 per organization, far from 120 starts a minute
    node_rates, api_rates = [], []

    def node_round() -> float:
        def one(w: int) -> int:
            with httpx.Client(timeout=120) as c:
                for j in range(per_worker):
                    _node_post(c, node, _node_body(100_000 + w * 1000 + j))
            return per_worker

        began = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            done = sum(pool.map(one, range(8)))
        return done / (time.perf_counter() - began)

    def api_round() -> float:
        done, seconds = api_throughput(stack, noop, per_worker)
        return done / seconds

    for _ in range(args.rounds):
        node_rates.append(node_round())
        api_rates.append(api_round())
    out["node_calls_per_s"] = p50(node_rates)
    out["api_calls_per_s"] = p50(api_rates)
    out["samples"] = {**out.get("samples", {}), "node_calls_per_s": node_rates, "api_calls_per_s": api_rates}


def bench_http(stack: Any, args: argparse.Namespace, out: dict[str, Any]) -> None:
    from calls.stack import PROBE
    from servers import Reply

    upstream = stack.upstreams["api.example.com"]
    upstream.on("/public/bench", Reply(200, [("Content-Type", "application/json")], HTTP_BODY))
    context = ssl.create_default_context(cafile=str(stack.root / "test-ca.pem"))
    named = {"headers": {"Host": "api.example.com"}, "extensions": {"sni_hostname": "api.example.com"}}
    direct_ms, runtime_ms = [], []
    body = {"ref": f"{PROBE}/public@1", "input": {"path": "bench"}}
    with (
        httpx.Client(verify=context, timeout=30, base_url=f"https://127.0.0.1:{upstream.port}") as direct,
        httpx.Client(timeout=30) as client,
    ):
        org = stack.org()
        for i in range(args.calls + 5):
            if i % 50 == 0:
                org = stack.org()
            began = time.perf_counter()
            r = direct.get("/public/bench", **named)  # type: ignore[arg-type]
            ms = (time.perf_counter() - began) * 1000
            assert r.content == HTTP_BODY
            _, answer = _post(client, f"{stack.url}/v1/actions/call", org.headers, body)
            if i >= 5:
                direct_ms.append(ms)
                t = answer["timings"]
                runtime_ms.append(t["template"] + t["egress"] + t["map"])
    out["http_direct_ms"] = p50(direct_ms)
    out["http_runtime_ms"] = p50(runtime_ms)


def bench_memory(stack: Any, args: argparse.Namespace, out: dict[str, Any], procs: dict[str, int]) -> None:
    from calls.stack import FREE

    noop = {"ref": f"{FREE}/noop@1", "input": {}}
    mem: dict[str, dict[str, float]] = {name: {"rest": rss_mib(pid)} for name, pid in procs.items()}
    total = args.memory_calls
    half = total // 2
    done = 0

    def one(w: int, n: int) -> None:
        with httpx.Client(timeout=120) as c:
            org = None
            for j in range(n):
                if j % 100 == 0:
                    org = stack.org()  # 100 calls an organization: far from 120 starts a minute
                assert org is not None
                r = c.post(f"{stack.api_urls[w % 2]}/v1/actions/call", headers=org.headers, json=noop)
                assert r.status_code == 200, r.text

    for label, n in (("after_half", half), ("after_all", total - half)):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda w, n=n: one(w, n // 8), range(8)))
        done += (n // 8) * 8
        for name, pid in procs.items():
            mem[name][label] = rss_mib(pid)
    out["memory_mib"] = mem
    out["memory_calls"] = done


# --- routines: the Temporal share, a burst of runs, Retry-After -------------------------------------


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
    stack: Any, org: Any, name: str, runs: int, floors: dict[str, Floor], out: dict[str, Any]
) -> None:
    """`runs` one-step runs of routine `name`, one after the other, each waited for by Temporal's long poll
    of its result (a client polling `GET /v1/runs/{id}` adds its reads to the run: `bench step_calls`),
    each followed by one workflow of each floor."""
    from engine.runs import routine_workflow_id

    rows: dict[str, list[float]] = {k: [] for k in ("run", "activity", "share", "tasks", *floors)}
    for i in range(runs + 2):
        for floor_name, floor in floors.items():
            ms = await floor.share()
            if i >= 2:
                rows[floor_name].append(ms)
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


def _floor_node_env(stack: Any) -> dict[str, str]:
    """What the floors (`bench.api_floor`, `bench.temporal_floor`'s node activity) call the stack's node
    with."""
    from calls.stack import FREE

    from node.credential import call_key

    url, _ = _node_of(stack)
    return {
        "B3OS_BENCH_NODE_URL": url,
        "B3OS_BENCH_NODE_ID": "node-a",
        "B3OS_BENCH_NODE_KEY": call_key(stack.node_secret("node-a")),
        "B3OS_BENCH_NODE_PACK": FREE,
    }


class Floor:
    """The bare Temporal workflow of `bench.temporal_floor` on the server of `client` (the stack's by
    default), its worker a process of the stack's."""

    def __init__(self, stack: Any, client: Any = None, name: str = "floor") -> None:
        self.client = client or stack.temporal_client
        self.queue = f"{name}-{os.getpid()}"
        address = self.client.service_client.config.target_host
        env = {**os.environ, "PYTHONPATH": str(REPO), **_floor_node_env(stack)}
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

    async def share(self) -> float:
        """The Temporal share (ms) of one workflow, waited for, as `_step_share` takes a run's."""
        handle = await self.start()
        await handle.result()
        total, act_ms, _ = _step_times([e async for e in handle.fetch_history_events()])
        return total - act_ms

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
    await _step_share(stack, org, "one", args.routine_runs, floors, out)
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
        floor_bursts.append(await floor.burst(100))
        node_bursts.append(await floor.burst(100, node=True))
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


# --- the table -----------------------------------------------------------------------------------


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
        add("  of which workflow tasks", f"{r['step_workflow_tasks_ms']:.2f} ms", "", "", None)
        add("  the step's activity", f"{r['step_activity_ms']:.2f} ms", "", "", None)
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
        add("  bare SDK, in-memory server", f"{r['floor_memory_burst_100_s']:.2f} s", "", "", None)
        if "floor_node_burst_100_s" in r:
            ratio = r["floor_node_burst_100_s"] / r["floor_burst_100_s"]
            value = f"{r['floor_node_burst_100_s']:.2f} s = {ratio:.2f}x bare"
            add("  bare SDK, its activity the noop on the node", value, "", "", None)
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
