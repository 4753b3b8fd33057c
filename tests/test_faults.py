"""The fault matrix (issue 15.4; `pytest -m faults`): each fault strikes tests/cluster.py's cluster under a
steady load of routine runs (8, of 2 organizations, started on both apis, each a 1 s step then a short
one) and direct calls (each with an Idempotency-Key, retried after Retry-After, through the other api
when one does not answer):

- a node SIGKILLed mid-call: its calls answer 503 and are retried, on the other node, charged once;
- a routine worker SIGKILLed mid-run: the other worker takes its runs over;
- an api restarted: the other keeps serving; clients and workers retry;
- PostgreSQL stopped for 5 s: 503 with Retry-After while it is down, never a 500; then all goes on;
- every node filled (16 slots busy): 503 node_busy with Retry-After; steps wait and succeed.

After each: every run ended, succeeded or failed with a sentence; one charged call per Idempotency-Key
(and only the call whose answer the key stores); GET /v1/usage equals the sum of the stored answers'
costs; no VM, mount or cgroup left on either node beyond its pool; no traceback in any log. One summary
line per fault (`pytest -s`) and `faults.json` in the cluster's root (kept until the session ends).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import loopback
import pytest
from calls.stack import ECHO, Org, Proc
from cluster import NODES, Cluster
from sqlmodel import Session, col, func, select
from workers import PATIENCE_S

from api.calls.tables import RUNNING, ActionCall, IdempotencyRecord
from api.models import utcnow
from node.config import Settings as NodeSettings
from node.vm import mounts

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

NAP_REF = f"{ECHO}/fail@1"  # priced per call; mode sleep
RUNS = 8
DIRECT = 4
ROUTINE = f"""\
name: faulty
inputs:
  n: {{type: integer}}
steps:
  - id: nap
    uses: {NAP_REF}
    with: {{mode: sleep, seconds: 1}}
  - id: say
    uses: {ECHO}/echo@1
    with: {{text: "run ${{{{ inputs.n }}}}"}}
outputs:
  said: ${{{{ steps.say.output.text }}}}
"""
CALLS = re.compile(r"^b3os_calls_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.M)
POOL = NodeSettings().pool_size


@dataclass
class Tally:
    """What one fault's load saw."""

    fault: str
    runs: Counter[str] = field(default_factory=Counter)
    direct: int = 0
    attempts: int = 0
    unreachable: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    saturated: bool = False  # the nodes-full fault: every VM slot of both nodes in use on 2 cores
    timed_out: int = 0  # calls of the nodes-full fault answered 504 tool_timed_out (counted apart)
    api: Counter[str] = field(default_factory=Counter)
    step_retries: int = 0
    worker_unreachable: int = 0
    taken_over: int = 0
    charged: int = 0
    usage_microusd: int = 0
    took_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        routine = {k.split(" ", 1)[1]: v for k, v in self.api.items() if k.startswith("routine ")}
        http = {k.split(" ", 1)[1]: v for k, v in self.api.items() if k.startswith("http ")}
        return {
            "fault": self.fault,
            "runs": dict(self.runs),
            "direct_calls": self.direct,
            "direct_attempts": self.attempts,
            "direct_retries": self.attempts - self.direct,
            "direct_unreachable": self.unreachable,
            "direct_refusals": dict(self.refusals),
            "step_retries": self.step_retries,
            "step_attempts_api_unreachable": self.worker_unreachable,
            "runs_taken_over": self.taken_over,
            "api_answers_routine": routine,
            "api_answers_http": http,
            "charged_calls": self.charged,
            "usage_microusd": self.usage_microusd,
            "server_errors": self.server_errors,
            "timed_out": self.timed_out,
            "took_s": round(self.took_s, 1),
        }


# --- the load ------------------------------------------------------------------------------------


async def direct_call(
    cluster: Cluster,
    org: Org,
    body: dict[str, Any],
    tally: Tally,
    *,
    first: int,
    after_s: float = 0.0,
) -> None:
    """One call with an Idempotency-Key, sent after `after_s`, until it is answered: a 429/503/409 waits
    its Retry-After, an api that does not answer is left for the other one. In the nodes-full fault
    (`tally.saturated`) a call answered 504 tool_timed_out is counted apart: its node runs 16 VMs at once
    on this 2-core machine, and under the whole suite's load a 1 or 2 s sleep in one has been seen not
    to end in its action's 5 s (a timed-out call is answered, charged compute and floor, and checked
    against the usage ledger like any other)."""
    await asyncio.sleep(after_s)
    key = f"fault-{uuid.uuid4().hex[:10]}"
    headers = {**org.headers, "Idempotency-Key": key}
    turn = first
    deadline = time.monotonic() + 120
    async with loopback.async_client(timeout=90) as http:
        while True:
            assert time.monotonic() < deadline, f"{tally.fault}: call {key} never answered"
            url = cluster.api_urls[turn % 2]
            tally.attempts += 1
            try:
                r = await http.post(f"{url}/v1/actions/call", headers=headers, json=body)
            except httpx.TransportError:
                tally.unreachable += 1
                turn += 1
                await asyncio.sleep(0.2)
                continue
            if r.status_code in (409, 429, 503):
                err = r.json()["error"]
                code = f"{err['code']}/{err['reason']}" if err.get("reason") else err["code"]
                assert r.headers.get("Retry-After"), f"{r.status_code} {code} without Retry-After: {r.text}"
                tally.refusals[f"{r.status_code} {code}"] += 1
                await asyncio.sleep(float(r.headers["Retry-After"]))
                continue
            if tally.saturated and r.status_code == 504 and r.json()["error"]["code"] == "tool_timed_out":
                tally.timed_out += 1
                return
            if r.status_code != 200:
                tally.server_errors.append(f"{r.status_code} {r.text[:300]}")
                return
            tally.direct += 1
            return


async def start_run(cluster: Cluster, org: Org, n: int, tally: Tally) -> str:
    """Start a run, through the other api when one does not answer or refuses for a while."""
    deadline = time.monotonic() + 60
    async with loopback.async_client(timeout=30) as http:
        while True:
            assert time.monotonic() < deadline, f"{tally.fault}: run {n} never started"
            url = cluster.api_urls[n % 2]
            try:
                r = await http.post(
                    f"{url}/v1/routines/faulty/runs", json={"inputs": {"n": n}}, headers=org.headers
                )
            except httpx.TransportError:
                n += 1
                await asyncio.sleep(0.2)
                continue
            if r.status_code in (429, 503):
                assert r.headers.get("Retry-After"), r.text
                tally.refusals[f"start {r.status_code} {r.json()['error']['code']}"] += 1
                await asyncio.sleep(float(r.headers["Retry-After"]))
                continue
            if r.status_code != 201:
                tally.server_errors.append(f"start {r.status_code} {r.text[:300]}")
                raise AssertionError(f"{tally.fault}: starting run {n}: {r.status_code} {r.text}")
            run_id: str = r.json()["run_id"]
            return run_id


async def final(cluster: Cluster, org: Org, run_id: str, tally: Tally) -> dict[str, Any]:
    """The ended run, read through either api (a 503 while the database is down is waited out)."""
    deadline = time.monotonic() + 120
    turn = 0
    async with loopback.async_client(timeout=30) as http:
        while True:
            assert time.monotonic() < deadline, f"{tally.fault}: run {run_id} still running"
            turn += 1
            try:
                r = await http.get(f"{cluster.api_urls[turn % 2]}/v1/runs/{run_id}", headers=org.headers)
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            if r.status_code == 503:
                assert r.headers.get("Retry-After"), r.text
            elif r.status_code != 200:
                tally.server_errors.append(f"read {r.status_code} {r.text[:300]}")
                raise AssertionError(f"{tally.fault}: reading run {run_id}: {r.status_code} {r.text}")
            elif r.json()["status"] != "running":
                body: dict[str, Any] = r.json()
                return body
            await asyncio.sleep(0.2)


def scrape(url: str) -> Counter[str]:
    """`b3os_calls_total` of one api by "surface code"."""
    found: Counter[str] = Counter()
    try:
        text = loopback.get(f"{url}/metrics", timeout=5).text
    except httpx.TransportError:
        return found
    for m in CALLS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        found[f"{labels['surface']} {labels['code']}"] += int(float(m["value"]))
    return found


@dataclass
class Load:
    """Two organizations, their routine stored; `run` drives runs and direct calls around a fault."""

    cluster: Cluster
    orgs: list[Org]
    metrics: dict[str, Counter[str]] = field(default_factory=dict)

    def snapshot(self, url: str) -> None:
        """Keep an api's counters (call it before it restarts: its counters start again at 0)."""
        self.metrics[url] = self.metrics.get(url, Counter()) + scrape(url)

    async def run(
        self,
        tally: Tally,
        fault: Callable[[], Awaitable[None]],
        *,
        extra: Sequence[Awaitable[None]] = (),
    ) -> list[dict[str, Any]]:
        cluster = self.cluster
        began = time.monotonic()
        before = {url: scrape(url) for url in cluster.api_urls}
        nap = {"ref": NAP_REF, "input": {"mode": "sleep", "seconds": 1}}

        async def runs() -> list[tuple[Org, str]]:
            started = []
            for n in range(RUNS):
                org = self.orgs[n % 2]
                started.append((org, await start_run(cluster, org, n, tally)))
                await asyncio.sleep(0.15)  # a steady trickle, not one burst
            return started

        direct = [
            direct_call(cluster, self.orgs[i % 2], nap, tally, first=i, after_s=0.6 * i)
            for i in range(DIRECT)
        ]
        starts = asyncio.ensure_future(runs())
        await asyncio.gather(starts, fault(), *direct, *extra)
        started = starts.result()
        ended = [await final(cluster, org, run_id, tally) for org, run_id in started]
        after = Counter[str]()
        for url in cluster.api_urls:
            after += self.metrics.pop(url, Counter()) + scrape(url)
        tally.api = after - sum(before.values(), Counter[str]())
        for run in ended:
            attempts = [step.get("attempts") or 1 for step in run["steps"].values()]
            tally.step_retries += sum(attempts) - len(attempts)
            error = run.get("error") or {}
            tally.runs[
                run["status"] if not error else f"failed {error.get('code')}: {error.get('message')}"
            ] += 1
        tally.took_s = time.monotonic() - began
        return ended


# --- the checks after each fault -----------------------------------------------------------------


def check_runs(ended: list[dict[str, Any]]) -> None:
    for run in ended:
        assert run["status"] in ("succeeded", "failed"), run
        if run["status"] == "failed":
            error = run.get("error") or {}
            assert error.get("message", "").strip(), f"a failed run without a sentence: {run}"


async def check_charges(cluster: Cluster, orgs: list[Org], tally: Tally) -> None:
    """One charged call per Idempotency-Key, the one whose answer the key stores; the ledger adds up."""
    for org in orgs:
        deadline = time.monotonic() + PATIENCE_S
        while True:  # a call whose api process died is marked lost when its lease ends
            calls = cluster.calls_of(org)
            if not any(c.state == RUNNING for c in calls) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert not [c.id for c in calls if c.state == RUNNING], "a call still holds its lease"
        with Session(cluster.engine) as session:
            records = list(
                session.exec(select(IdempotencyRecord).where(col(IdempotencyRecord.org_id) == org.org_id))
            )
        assert all(r.status is not None for r in records), [r.key for r in records if r.status is None]
        stored = {r.call_id: _stored_total(r) for r in records if r.call_id is not None}
        assert len(stored) == len(records), "two keys store one call's answer"
        charged = {c.id: c.total for c in calls if c.total > 0 or c.ran}
        extra = set(charged) - set(stored)
        assert not extra, f"charged without a stored answer (charged twice for one key?): {extra}"
        assert all(charged.get(call_id, 0) == total for call_id, total in stored.items()), (charged, stored)
        total, tool_calls = 0, 0
        async with loopback.async_client(base_url=cluster.api_urls[1], timeout=30) as http:
            for month in sorted({c.finished_at.strftime("%Y-%m") for c in calls if c.finished_at}):
                usage = (await http.get("/v1/usage", params={"month": month}, headers=org.headers)).json()
                total += usage["cost"]["total"]
                tool_calls += usage["units"]["actions.tool_call"]
        assert total == sum(stored.values()) == sum(c.total for c in calls), (total, stored)
        assert tool_calls == len(charged), (tool_calls, charged)
        tally.charged += len(charged)
        tally.usage_microusd += total


def _stored_total(record: IdempotencyRecord) -> int:
    body = record.body or {}
    cost = body.get("cost") if record.status == 200 else body.get("error", {}).get("cost")
    return int((cost or {}).get("total", 0))


def node_leftovers(cluster: Cluster) -> list[str]:
    """VM directories, mounts and cgroups that no live node's pool accounts for."""
    live = {str(p.popen.pid) for name, p in cluster.parts.items() if name in NODES and p.popen.poll() is None}
    problems: list[str] = []
    for run_dir in cluster.root.glob("*-vms"):
        for node_dir in run_dir.iterdir():
            pid = node_dir.name.removeprefix("node-")
            vms = sorted(node_dir.glob("vm-*"))
            if pid not in live:
                problems.append(f"{node_dir} of a dead node")
            elif len(vms) > POOL:
                problems.append(f"{node_dir}: {len(vms)} VMs, more than its pool of {POOL}")
            for point in mounts.mounts_under(node_dir):
                top = node_dir / point.relative_to(node_dir).parts[0] if point != node_dir else node_dir
                if pid not in live or (top.name.startswith("vm-") and top not in vms):
                    problems.append(f"mount {point}")
    for group in Path("/sys/fs/cgroup").glob("*/**/b3os-node-*"):
        pid = group.name.removeprefix("b3os-node-")
        if pid in live:
            if len([c for c in group.iterdir() if c.is_dir()]) > POOL:
                problems.append(f"cgroup {group}: more VMs than the pool")
        elif _was_ours(cluster, pid):  # (another node on this machine is none of ours)
            problems.append(f"cgroup {group} of a dead node")
    return problems


def _was_ours(cluster: Cluster, pid: str) -> bool:
    return any(str(p.popen.pid) == pid for p in cluster.procs if p.name in NODES)


def _leftovers(cluster: Cluster) -> list[str]:
    try:
        return node_leftovers(cluster)
    except FileNotFoundError as exc:  # a VM deleted while we looked
        return [str(exc)]


async def check_nodes(cluster: Cluster) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while problems := _leftovers(cluster):  # a node refills its pool, deleting used VMs, meanwhile
        assert time.monotonic() < deadline, problems
        await asyncio.sleep(0.3)


def log_offsets(cluster: Cluster) -> dict[Path, int]:
    return {p.log: p.log.stat().st_size for p in cluster.procs if p.log.exists()}


def check_logs(cluster: Cluster, since: dict[Path, int], tally: Tally) -> None:
    for proc in cluster.procs:
        with proc.log.open("rb") as f:
            f.seek(since.get(proc.log, 0))
            text = f.read()
        at = text.find(b"Traceback")
        if at >= 0:  # the lines before it and the traceback itself (the log's tail may be other lines)
            shown = text[max(0, at - 1500) : at + 6000].decode(errors="replace")
            pytest.fail(f"a traceback in {proc.name}'s log ({proc.log}):\n{shown}")
        if proc.name.startswith("worker"):
            tally.worker_unreachable += text.count(b"did not answer")


# --- the matrix ----------------------------------------------------------------------------------


@pytest.fixture
async def load(cluster: Cluster) -> Load:
    """Two fresh organizations per fault (so each fault's charges and usage are its own)."""
    orgs = [cluster.runner() for _ in range(2)]
    for org in orgs:
        stored = await cluster.store(org, ROUTINE)
        assert stored.status_code == 201, stored.text
    return Load(cluster, orgs)


SUMMARIES: list[dict[str, Any]] = []


async def settle(
    cluster: Cluster,
    load: Load,
    tally: Tally,
    ended: list[dict[str, Any]],
    since: dict[Path, int],
    *,
    others: Sequence[Org] = (),
) -> None:
    check_runs(ended)
    await check_charges(cluster, [*load.orgs, *others], tally)
    await check_nodes(cluster)
    check_logs(cluster, since, tally)
    assert not tally.server_errors, tally.server_errors
    summary = tally.summary()
    SUMMARIES.append(summary)
    (cluster.root / "faults.json").write_text(json.dumps(SUMMARIES, indent=1))
    print(f"\nFAULT {json.dumps(summary)}")  # noqa: T201 (pytest -s)


async def _running_on(cluster: Cluster, node_id: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with Session(cluster.engine) as session:
            found = session.exec(
                select(ActionCall).where(col(ActionCall.node_id) == node_id, col(ActionCall.state) == RUNNING)
            ).first()
        if found is not None:
            return
        assert time.monotonic() < deadline, f"no call ran on {node_id}"
        await asyncio.sleep(0.05)


async def test_a_node_killed_mid_call_has_its_calls_retried_on_the_other_node(
    cluster: Cluster, load: Load
) -> None:
    tally, since = Tally("node SIGKILL"), log_offsets(cluster)
    killed: list[Proc] = []
    kill_at: list[dt.datetime] = []

    async def fault() -> None:
        await _running_on(cluster, "node-a")
        killed.append(cluster.kill("node-a"))
        kill_at.append(utcnow())

    try:
        ended = await load.run(tally, fault)
    finally:
        cluster.restart("node-a")  # it removes what the killed one left
    await settle(cluster, load, tally, ended, since)
    assert tally.runs["succeeded"] == RUNS, ended
    calls = [c for org in load.orgs for c in cluster.calls_of(org)]
    lost = [c for c in calls if c.node_id == "node-a" and c.code == "tool_unavailable"]
    assert lost and all(c.total == 0 for c in lost)  # the killed calls: answered 503, nothing billed
    after = [c for c in calls if c.started_at > max(c.finished_at or kill_at[0] for c in lost)]
    assert after and {c.node_id for c in after} == {"node-b"}  # the retries: on the other node


def _identity(worker: Proc) -> str:
    """A worker process's Temporal identity (the SDK's default: pid@host)."""
    return f"{worker.popen.pid}@{socket.gethostname()}"


async def _until_holding_a_step(cluster: Cluster, identity: str) -> None:
    """Wait until the worker of `identity` runs a step's activity of one of the cluster's running runs."""
    client = cluster.temporal_client
    query = f"TaskQueue = '{cluster.queue}' AND ExecutionStatus = 'Running'"
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        async for execution in client.list_workflows(query):
            desc = await client.get_workflow_handle(execution.id).describe()
            if any(a.last_worker_identity == identity for a in desc.raw_description.pending_activities):
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"worker {identity} ran no step within {PATIENCE_S} s")


async def test_a_worker_killed_mid_run_has_its_runs_taken_over(cluster: Cluster, load: Load) -> None:
    tally, since = Tally("worker SIGKILL"), log_offsets(cluster)

    killed: list[Proc] = []

    async def fault() -> None:
        # killed once it runs a step, however busy the machine
        await _until_holding_a_step(cluster, _identity(cluster.parts["worker-a"]))
        killed.append(cluster.kill("worker-a"))

    try:
        ended = await load.run(tally, fault)
    finally:
        cluster.restart("worker-a")
    identity = _identity(killed[0])
    for run in ended:  # a run with a task taken by the killed worker that went on elsewhere
        events = await cluster.history(run["workflow_id"])
        tally.taken_over += any(identity in str(e) for e in events) and run["status"] == "succeeded"
    await settle(cluster, load, tally, ended, since)
    assert tally.runs["succeeded"] == RUNS, ended
    assert tally.taken_over > 0, "the killed worker had no run in hand"


async def test_an_api_restarted_leaves_the_other_serving(cluster: Cluster, load: Load) -> None:
    tally, since = Tally("api restart"), log_offsets(cluster)

    async def fault() -> None:
        await asyncio.sleep(1.0)
        load.snapshot(cluster.api_urls[0])
        await asyncio.to_thread(cluster.restart, "api-a")

    ended = await load.run(tally, fault)
    await settle(cluster, load, tally, ended, since)
    assert tally.runs["succeeded"] == RUNS, ended


async def test_postgres_down_for_5_s_answers_503_and_everything_continues(
    cluster: Cluster, load: Load
) -> None:
    tally, since = Tally("postgres 5 s"), log_offsets(cluster)
    assert cluster.postgres is not None
    postgres = cluster.postgres
    down = asyncio.Event()
    probes: Counter[str] = Counter()

    async def fault() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(postgres.halt)
        down.set()
        try:
            await asyncio.sleep(5)
        finally:
            await asyncio.to_thread(postgres.resume)
            down.clear()

    async def probe() -> None:  # what a client sees of each api while the database is down
        await down.wait()
        async with loopback.async_client(timeout=10) as http:
            while down.is_set():
                for url in cluster.api_urls:
                    r = await http.get(f"{url}/v1/usage", headers=load.orgs[0].headers)
                    code = r.json().get("error", {}).get("code", "ok") if r.status_code != 200 else "ok"
                    probes[f"{r.status_code} {code}"] += 1
                    if r.status_code == 503:
                        assert r.headers.get("Retry-After"), r.text
                    elif r.status_code != 200:
                        tally.server_errors.append(f"probe {r.status_code} {r.text[:300]}")
                await asyncio.sleep(0.2)

    ended = await load.run(tally, fault, extra=[probe()])
    tally.refusals.update({f"probe {k}": v for k, v in probes.items()})
    await settle(cluster, load, tally, ended, since)
    assert any(k.startswith("probe 503") for k in tally.refusals), probes
    assert tally.runs["succeeded"] == RUNS, ended


async def _until_nodes_full(cluster: Cluster) -> None:
    """Wait until every slot of both nodes holds a call (read from the database)."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        with Session(cluster.engine) as session:
            running = session.exec(
                select(func.count()).where(
                    col(ActionCall.state) == RUNNING, col(ActionCall.node_id).in_(NODES)
                )
            ).one()
        if running >= 8 * len(NODES):
            return
        assert time.monotonic() < deadline, f"the nodes never ran {8 * len(NODES)} calls at once ({running})"
        await asyncio.sleep(0.05)


async def test_every_node_full_refuses_with_node_busy_and_steps_wait(cluster: Cluster, load: Load) -> None:
    tally, since = Tally("nodes full", saturated=True), log_offsets(cluster)
    fillers = [cluster.org() for _ in range(4)]  # 4 calls at once each: 16, every slot of both nodes
    # each holds its slot to the action's 5 s timeout (answered 504 tool_timed_out), however busy the machine
    hold = {"ref": NAP_REF, "input": {"mode": "sleep", "seconds": 30}}
    filled = [direct_call(cluster, fillers[i % 4], hold, tally, first=i) for i in range(16)]
    prober = cluster.org()

    async def fault() -> None:  # a call sent once every slot is taken finds none
        await _until_nodes_full(cluster)
        await direct_call(
            cluster, prober, {"ref": NAP_REF, "input": {"mode": "sleep", "seconds": 1}}, tally, first=0
        )

    ended = await load.run(tally, fault, extra=filled)
    await settle(cluster, load, tally, ended, since, others=[*fillers, prober])
    calls = [c for org in [*load.orgs, *fillers, prober] for c in cluster.calls_of(org)]
    assert {node: _peak(calls, node) for node in NODES} == dict.fromkeys(NODES, 8)  # every slot was busy
    assert tally.refusals["503 tool_unavailable/node_busy"] + tally.api["routine tool_unavailable"] > 0
    # As with the direct calls (`direct_call`), a step's 1 s sleep on a node running 8 VMs on 2 cores under
    # the whole suite's load has been seen not to end in its action's 5 s (a call's time counts from the
    # node's receipt: its VM's start too): such a run ends failed with that sentence, and none otherwise.
    timed_out = sum(n for outcome, n in tally.runs.items() if outcome.startswith("failed tool_timed_out: "))
    assert tally.runs["succeeded"] + timed_out == RUNS and tally.runs["succeeded"] >= RUNS // 2, ended


def _peak(calls: list[ActionCall], node_id: str) -> int:
    """The most calls that ran at once on a node."""
    edges = sorted(
        (at, step)
        for c in calls
        if c.node_id == node_id and c.finished_at is not None
        for at, step in ((c.started_at, 1), (c.finished_at, -1))
    )
    running = most = 0
    for _, step in edges:  # at one moment an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most
