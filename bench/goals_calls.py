"""The goals' calls (`bench goals`): noop over the node, the api and the api's floor with the CPU of each,
calls per second, echo with and without a file, HTTP actions, and the resident memory of the stack's
processes over many calls; and what the floors call the stack's node with."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.api_calls import api_throughput
from bench.procstats import cpu_split_ms, p50, p95, pool_cpu_ms, rss_mib
from bench.profiler import Profiler
from bench.routinestack import REPO

PHASES = ("start", "copy", "unpack", "run", "collect", "delete")
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool" / "bin" / "echo-tool"
HTTP_BODY = b'{"ok": true, "items": [1, 2, 3]}'
LONE_AFTER_S = 0.05
"""A latency figure's calls are lone calls: each is made this long after the one before has ended, once the
work that call left (the node prepares and removes VMs once a call ends) is done. Made back to back, one
kind of call had carried the last one's leftover work: the bare FastAPI floor, measured after the api,
was once slower than the api. The CPU figures are measured back to back, over calls of their own."""


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
    env = {**os.environ, "PYTHONPATH": str(REPO), **floor_node_env(stack)}
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
        for i in range(args.calls):  # the CPU figures: back to back
            if i % 25 == 0:
                org = stack.org()  # far from 120 starts a minute
            _node_post(client, node, _node_body(i))
            _post(client, call_url, org.headers, noop)
            _post(client, floor_url, {}, noop)
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
        for i in range(args.calls):  # the latency figures: lone calls, interleaved
            if i % 25 == 0:
                org = stack.org()
            time.sleep(LONE_AFTER_S)
            began = time.perf_counter()
            subprocess.run([str(ECHO_TOOL), "noop"], input=stdin, capture_output=True, check=True)
            rows["bare"].append((time.perf_counter() - began) * 1000)
            time.sleep(LONE_AFTER_S)
            ms, result = _node_post(client, node, _node_body(args.calls + i))
            rows["node"].append(ms)
            rows["node_share"].append(ms - sum(result["timings"].get(p, 0.0) for p in PHASES))
            time.sleep(LONE_AFTER_S)
            ms, body = _post(client, call_url, org.headers, noop)
            phases = sum(body["timings"][p] for p in PHASES)
            rows["api"].append(ms)
            rows["api_node_phases"].append(phases)
            rows["api_share"].append(ms - phases)
            time.sleep(LONE_AFTER_S)
            rows["floor_api"].append(_post(client, floor_url, {}, noop)[0])
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


def floor_node_env(stack: Any) -> dict[str, str]:
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
