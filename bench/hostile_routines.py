"""The hostile corpus of tests/engine/test_hostile_routines.py, timed: what each probe costs, and whether
it slows another organization's small run.

Starts the routine tests' stack (tests/realstack.py: a Temporal dev server, two api processes, a node,
a routine worker process) and prints, in milliseconds:

- each refused routine: the time `POST /v1/routines` took to answer its 400;
- each failing run: the time from its start to its end, and the longest workflow task of its history
  (workflow task started to completed: how long the run held the worker's workflow thread, its
  expressions' evaluation included);
- fields at the bounds of engine.cel_values evaluated in this process (the dearest an expression may be);
- each probe's longest field evaluated in this process (`engine.expressions`, the same inputs, the
  expressions compiled, as on a worker that ran them before);
- a small one-step run of another organization: its latency (from sending its start to its workflow's
  last event, so the 100 ms steps of polling it are left out) alone, and alongside the hostile
  organization's requests sent at the same time: the whole corpus once (every refused routine stored,
  every failing run started: the issue's measure), twice the runs failing before any call (they hold
  the worker only), and twice every failing run (the file chains also hold the node and the api)
  (median of `--rounds`), the ratio of each to alone, and where the small run's time went (its
  history's workflow task and activity waits and work, and the api's answer to its start);
- the first api's `GET /healthz` (asked every 25 ms from a process of its own, 1 s timeout) while the
  small runs run alone and alongside: its median, 99th percentile and longest answer, and how many took
  more than 100 ms.

Run: `.venv/bin/python -m bench hostile_routines [--rounds N] [--fairness-only]` (root; needs the node's
base template); `--fairness-only` stores the probes and measures only the small run (alone, alongside
the whole corpus, and alongside twice the runs failing before any call) and `/healthz`.
`B3OS_TEMPORAL_WORKFLOW_TASKS` in the environment sets the worker's workflow task slots.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent


def _in_process(source: str, inputs: dict[str, Any]) -> float:
    """The longest evaluation of one of a probe's fields here, its expressions compiled (as on a worker that
    ran them before), in ms; fields that read step outputs (which only a run has) are left out."""
    from engine import expressions
    from engine.scope import Scope
    from engine.validate import load_routine

    routine = load_routine(source)
    scope = Scope({"inputs": inputs, "steps": {}})
    fields: list[tuple[str, Any]] = []
    for step in routine.steps:
        if step.foreach is not None:
            fields.append(("foreach", step.foreach))
        fields.append(("with", dict(step.with_)))
    fields.append(("outputs", dict(routine.outputs)))
    longest, item = 0.0, None
    for kind, value in fields:
        if "steps." in str(value):
            continue
        for _ in range(2):  # the first compiles
            here = scope if kind != "with" or item is None else scope.with_names({"item": item, "index": 0})
            began = time.perf_counter()
            try:
                if kind == "foreach":
                    item = (expressions.evaluate_foreach(value, here) or [None])[0]
                else:
                    expressions.evaluate(value, here)
            except expressions.ExpressionError:
                pass
            ms = (time.perf_counter() - began) * 1000
        longest = max(longest, ms)
    return longest


AT_THE_BOUNDS: list[tuple[str, str, dict[str, Any]]] = [
    ("5,000 steps: map(x, map(y, x * y))", "${{ inputs.l.map(x, inputs.l.map(y, x*y)) }}", {"l": [1] * 3000}),
    ("map(o, o.a) over 1,000 items", "${{ inputs.o.map(o, o.a) }}", {"o": [{"a": i} for i in range(1000)]}),
    ("49,000 values read and given", "${{ inputs.l }}", {"l": list(range(49_000))}),
    ("1 MiB of text built", "${{ inputs.s + inputs.s }}", {"s": "x" * 524_000}),
    ("1 MiB of text spliced", "${{ inputs.s }}-${{ inputs.s }}", {"s": "x" * 524_000}),
]
"""Fields that pass (or just fail) at the bounds of engine.cel_values, the dearest an expression may be."""


def _at_the_bounds() -> None:
    from engine import expressions
    from engine.scope import Scope

    print("fields at the bounds, evaluated in this process (compiled; median of 5), ms")
    for name, value, inputs in AT_THE_BOUNDS:
        times = []
        for _ in range(6):
            scope = Scope({"inputs": inputs, "steps": {}})  # converted again, as in a new run
            began = time.perf_counter()
            try:
                expressions.evaluate({"v": value}, scope)
                outcome = "ok"
            except expressions.ExpressionError as exc:
                outcome = exc.problem[:40]
            times.append((time.perf_counter() - began) * 1000)
        print(f"  {name:36} {statistics.median(times[1:]):6.1f}  ({outcome})")


async def _longest_task_ms(stack: Any, workflow_id: str) -> float:
    from temporalio.api.enums.v1 import EventType

    started: dict[int, float] = {}
    longest = 0.0
    for event in await stack.history(workflow_id):
        at = event.event_time.ToMicroseconds() / 1000
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            begun = started.get(event.workflow_task_completed_event_attributes.started_event_id)
            if begun is not None:
                longest = max(longest, at - begun)
    return longest


@functools.cache
def _client(url: str) -> httpx.AsyncClient:
    """One client (and its kept connections) for the timed runs, as a user's SDK keeps one: making a client
    takes ~20 ms of CPU (its TLS context), which each start's time had counted while it made its own."""
    return httpx.AsyncClient(base_url=url, timeout=30)


async def _timed_run(stack: Any, org: Any, name: str, inputs: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """A run started and polled to its end; its latency, in ms: from sending its start to its workflow's
    last event (the polling's 100 ms steps left out), and the run as read."""
    http = _client(stack.url)
    sent_at = time.time()
    began = time.perf_counter()
    started = await http.post(f"/v1/routines/{name}/runs", json={"inputs": inputs}, headers=org.headers)
    answered = (time.perf_counter() - began) * 1000
    assert started.status_code == 201, started.text
    run = await stack.final(org, started.json()["run_id"], timeout_s=120)
    run["start_answered_ms"] = answered
    run["start_timing"] = started.headers.get("Server-Timing", "")  # where the start's time went, ms
    events = await stack.history(run["workflow_id"])
    return events[-1].event_time.ToMicroseconds() / 1000 - sent_at * 1000, run


PHASES = (
    "start answered",
    "workflow tasks waited",
    "ran",
    "activity waited",
    "ran",
    "of it: to its call admitted",
    "admitted to finished",
    "finished to the activity's end",
    "run in Temporal",
    "the call's VM: start",
    "run",
    "collect and delete",
    "the call outside its VM",
)


async def _phases(stack: Any, org: Any, run: dict[str, Any]) -> list[float]:
    """Where a one-step run's time went (ms, in PHASES' order): the api's answer to its start; its workflow
    tasks' waits (scheduled to started) and work (started to completed), its activity's likewise, the
    activity split at its call's admission and finish (the api's `action_calls` row: its last call); its
    history's first event to its last."""
    from temporalio.api.enums.v1 import EventType as E

    at: dict[int, float] = {}
    waits = {"wft": 0.0, "wft_run": 0.0, "act": 0.0, "act_run": 0.0}
    events = await stack.history(run["workflow_id"])
    for event in events:
        t = event.event_time.ToMicroseconds() / 1000
        at[event.event_id] = t
        kind = event.event_type
        if kind == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            waits["wft"] += t - at[event.workflow_task_started_event_attributes.scheduled_event_id]
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            waits["wft_run"] += t - at[event.workflow_task_completed_event_attributes.started_event_id]
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            waits["act_run"] += t - at[attrs.started_event_id]
            waits["act"] += at[attrs.started_event_id] - at[attrs.scheduled_event_id]
            act_began, act_ended = at[attrs.started_event_id], t
    whole = at[events[-1].event_id] - at[events[0].event_id]
    call = stack.calls_of(org)[-1]
    admitted, finished = (call.started_at.timestamp() * 1000, call.finished_at.timestamp() * 1000)
    timings = _timings(stack, call.id)
    vm = [
        sum(timings.get(p, 0.0) for p in phase)
        for phase in (("start", "copy", "unpack"), ("run",), ("collect", "delete"))
    ]
    return [
        run["start_answered_ms"],
        waits["wft"],
        waits["wft_run"],
        waits["act"],
        waits["act_run"],
        admitted - act_began,
        finished - admitted,
        act_ended - finished,
        whole,
        vm[0],
        vm[1],
        vm[2],
        finished - admitted - sum(vm),
    ]


def _timings(stack: Any, call_id: str) -> dict[str, float]:
    """The node's phases of a call (ms), from the answer the api stored under the step's key."""
    from sqlmodel import Session, col, select

    from api.calls.tables import IdempotencyRecord

    with Session(stack.engine) as session:
        record = session.exec(
            select(IdempotencyRecord).where(col(IdempotencyRecord.call_id) == call_id)
        ).first()
    found = (record.body or {}).get("timings") if record is not None else None
    return (
        {k: float(v) for k, v in found.items() if isinstance(v, (int, float))}
        if isinstance(found, dict)
        else {}
    )


def _phase_text(samples: list[list[float]]) -> str:
    medians = [statistics.median(column) for column in zip(*samples, strict=True)]
    return ", ".join(f"{name} {ms:.0f}" for name, ms in zip(PHASES, medians, strict=True))


_PROBE = """
import sys, time, httpx
with httpx.Client(timeout=1.0) as http:
    while True:
        began = time.perf_counter()
        try:
            http.get(sys.argv[1]).raise_for_status()
            ms = (time.perf_counter() - began) * 1000
        except httpx.HTTPError:
            ms = 1000.0
        print(f"{ms:.2f}", flush=True)
        time.sleep(max(0.0, 0.025 - ms / 1000))
"""


_HOSTILE = """
import asyncio, json, sys, httpx
url, headers, bodies = json.loads(sys.stdin.readline())
bodies = [(path, body.encode(), status) for path, body, status in bodies]

async def start(http, path, body, status):
    r = await http.post(path, content=body, headers=headers)
    assert r.status_code == status, r.text[:300]
    return r.json()["run_id"] if status == 201 else None

async def main():
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in sys.stdin:
            ids = await asyncio.gather(*(start(http, p, b, s) for p, b, s in bodies))
            print(json.dumps([i for i in ids if i is not None]), flush=True)

asyncio.run(main())
"""


class _HostileClient:
    """The hostile organization's client in a process of its own, as it would be on a machine of its own:
    on `go`, it sends every request of its list at once (their bodies, up to 600 KB each, encoded before:
    the runs it starts, and the routines it stores that are refused) and answers the started runs' ids.
    In this process its encoding, sending and reading of the answers put ~20 s of CPU per bench run
    beside the small run's timing, in the same event loop."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        runs: list[tuple[str, dict[str, Any]]],
        refused: list[str] = [],  # noqa: B006 (read only)
    ) -> None:
        command = [sys.executable, "-c", _HOSTILE]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        bodies = [(f"/v1/routines/{name}/runs", json.dumps({"inputs": inputs}), 201) for name, inputs in runs]
        bodies += [("/v1/routines", json.dumps({"yaml": source}), 400) for source in refused]
        self._send(json.dumps([url, {**headers, "Content-Type": "application/json"}, bodies]))

    def _send(self, line: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()

    def go(self) -> None:
        """Start the runs (returns at once)."""
        self._send("go")

    async def run_ids(self) -> list[str]:
        """The run ids of the last `go`."""
        assert self._proc.stdout is not None
        line = await asyncio.to_thread(self._proc.stdout.readline)
        assert line, "the hostile client stopped"
        ids: list[str] = json.loads(line)
        return ids

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


class _Healthz:
    """`GET /healthz` of one api every 25 ms from a process of its own (this one's event loop and GIL are
    busy with the bench): the answers' times, in ms, between `start` and `stop` (a timeout counts 1,000)."""

    def __init__(self, url: str) -> None:
        self._url = f"{url}/healthz"
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [sys.executable, "-c", _PROBE, self._url]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)

    def stop(self) -> str:
        assert self._proc is not None
        self._proc.terminate()
        out, _ = self._proc.communicate()
        answers = [float(line) for line in out.split()]
        if not answers:
            return "/healthz: no answer"
        slowest = answers.index(max(answers)) + 1
        times = sorted(answers)
        p99 = times[int(len(times) * 0.99)]
        over = sum(t > 100 for t in times)
        return (
            f"/healthz median {statistics.median(times):.1f}, p99 {p99:.1f}, max {times[-1]:.1f} "
            f"(answer {slowest}), {over} of {len(times)} over 100 ms"
        )


async def _bench(stack: Any, rounds: int, fairness_only: bool = False, small: str = "echo") -> None:
    from test_hostile_routines import FAILED, REFUSED

    hostile, other = stack.runner(), stack.runner()
    if fairness_only:
        names = {}
        for name, source, _, _ in FAILED:
            names[name] = (await stack.store(hostile, source)).json()["name"]
        await _fairness(stack, hostile, other, names, rounds, small, only_two=True)
        return
    _at_the_bounds()
    print("refused at validation (POST /v1/routines), ms")
    async with httpx.AsyncClient(base_url=stack.url, timeout=120) as http:
        for name, source, _, _ in REFUSED:
            began = time.perf_counter()
            answer = await http.post("/v1/routines", json={"yaml": source}, headers=hostile.headers)
            ms = (time.perf_counter() - began) * 1000
            print(f"  {name:28} {ms:8.1f}  ({answer.status_code})")
    print(
        "failed runs, ms: start to end | longest workflow task, first run and second run (its expressions "
        "compiled) | longest field evaluated in process"
    )
    worst_task, worst_eval = 0.0, 0.0
    names = {}
    for name, source, inputs, _ in FAILED:
        stored = await stack.store(hostile, source)
        names[name] = stored.json()["name"]
        ms, run = await _timed_run(stack, hostile, names[name], inputs)
        first = await _longest_task_ms(stack, run["workflow_id"])
        _, again = await _timed_run(stack, hostile, names[name], inputs)
        task = await _longest_task_ms(stack, again["workflow_id"])
        field = _in_process(source, inputs)
        worst_task, worst_eval = max(worst_task, task), max(worst_eval, field)
        code = (run.get("error") or {}).get("code")
        print(f"  {name:28} {ms:8.1f} | {first:6.1f} {task:6.1f} | {field:6.1f}  ({run['status']}: {code})")
    print(f"worst: workflow task of a second run {worst_task:.1f} ms, field in process {worst_eval:.1f} ms")
    await _fairness(stack, hostile, other, names, rounds, small)


async def _fairness(
    stack: Any,
    hostile: Any,
    other: Any,
    names: dict[str, str],
    rounds: int,
    small_action: str,
    only_two: bool = False,
) -> None:
    """The small run of another organization alone, then alongside the hostile runs; /healthz meanwhile."""
    from test_hostile_routines import FAILED, REFUSED, one_step

    small = one_step("small", "{text: hi}")
    if small_action == "noop":  # the platform's part alone: the echo tool's own work is two jq processes
        small = small.replace("/echo@", "/noop@").replace("with: {text: hi}", "with: {}")
    assert (await stack.store(other, small)).status_code == 201
    await _timed_run(stack, other, "small", {})  # the first run of a routine compiles its expressions
    if only_two:  # the probes have not run yet: once each first, as the full bench has
        for name, _, inputs, _ in FAILED:
            await stack.final(hostile, await stack.start_run(hostile, names[name], inputs), timeout_s=120)
    health = _Healthz(stack.url)
    health.start()
    alone, phases = [], []
    for _ in range(rounds):
        ms, run = await _timed_run(stack, other, "small", {})
        alone.append(ms)
        phases.append(await _phases(stack, other, run))
    print(
        f"small run of another organization (start sent to its last event), median of {rounds}, ms: "
        f"alone {statistics.median(alone):.0f}"
        f"  ({health.stop()})\n    {_phase_text(phases)}"
    )
    # the probes that fail before any call hold only the worker; the others call the echo tool too
    before_call = [(n, inputs) for n, _, inputs, expected in FAILED if expected[0] is not None]
    every = [(n, inputs) for n, _, inputs, _ in FAILED]
    refused = [source for _, source, _, _ in REFUSED]
    mixes = [
        ("the whole corpus once: every refused routine stored, every failing run started", every, refused),
        ("twice the runs failing before any call", before_call * 2, []),
        ("twice every failing run", every * 2, []),
    ]
    for label, mix, stores in mixes[:2] if only_two else mixes:
        alongside, phases = [], []
        client = _HostileClient(stack.url, hostile.headers, [(names[n], inputs) for n, inputs in mix], stores)
        health.start()
        for _ in range(rounds):
            # started together; only the small run is polled (polling a run queries its workflow too)
            client.go()
            ms, run = await _timed_run(stack, other, "small", {})
            run_ids = await client.run_ids()
            alongside.append(ms)
            for run_id in run_ids:
                await stack.final(hostile, run_id, timeout_s=120)
            phases.append(await _phases(stack, other, run))
        client.close()
        ratio = statistics.median(alongside) / statistics.median(alone)
        print(
            f"  alongside {label} ({len(mix)} runs, {len(stores)} stores): {statistics.median(alongside):.0f}"
            f" = {ratio:.1f}x"
            f"  ({health.stop()})\n    {_phase_text(phases)}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench hostile_routines")
    parser.add_argument("--rounds", type=int, default=5, help="small runs alone and alongside (default 5)")
    parser.add_argument(
        "--fairness-only", action="store_true", help="only the small run alone and alongside, and /healthz"
    )
    parser.add_argument(
        "--small",
        choices=("echo", "noop"),
        default="echo",
        help="the small run's one step: the free echo (default; its tool runs jq twice) or the free noop",
    )
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engine")]
    from realstack import RoutineStack

    from bench.routinestack import routine_stack

    stack_env = RoutineStack.env

    def env(self: RoutineStack, **extra: str) -> dict[str, str]:
        # rounds of 16 runs of one organization pass its 60 starts a minute; the worker's slots as asked
        tasks = {k: v for k, v in os.environ.items() if k == "B3OS_TEMPORAL_WORKFLOW_TASKS"}
        return stack_env(self, **{"B3OS_RUN_STARTS_PER_MINUTE": "100000", **tasks, **extra})

    RoutineStack.env = env  # type: ignore[method-assign]

    async def run() -> None:
        async with routine_stack("hostile", api_admission_wait=False) as stack:
            await _bench(stack, args.rounds, args.fairness_only, args.small)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
