"""The hostile corpus of tests/engine/test_hostile_routines.py, timed: what each probe costs, and whether
it slows another organization's small run.

Starts the routine tests' stack (tests/realstack.py: a Temporal dev server, two api processes, a node,
a routine worker process) and prints, in milliseconds:

- each refused routine: the time `POST /v1/routines` took to answer its 400;
- each failing run: the time from its start to its end, and the longest workflow task of its history
  (workflow task started to completed: how long the run held the worker's workflow thread, its
  expressions' evaluation included);
- fields at the bounds of engine.cel_runtime evaluated in this process (the dearest an expression may be);
- each probe's longest field evaluated in this process (`engine.expressions`, the same inputs, the
  expressions compiled, as on a worker that ran them before);
- a small one-step run of another organization: its latency alone, and alongside twice the failing
  runs started at the same time: those failing before any call (they hold the worker only), then
  every one (the file chains also hold the node and the api) (median of `--rounds`).

Run: `.venv/bin/python -m bench hostile_routines [--rounds N]` (root; needs the node's base template).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
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
"""Fields that pass (or just fail) at the bounds of engine.cel_runtime, the dearest an expression may be."""


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


async def _timed_run(stack: Any, org: Any, name: str, inputs: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    began = time.perf_counter()
    run_id = await stack.start_run(org, name, inputs)
    run = await stack.final(org, run_id, timeout_s=120)
    return (time.perf_counter() - began) * 1000, run


async def _bench(stack: Any, rounds: int) -> None:
    from test_hostile_routines import FAILED, REFUSED, one_step

    _at_the_bounds()
    hostile, other = stack.runner(), stack.runner()
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

    assert (await stack.store(other, one_step("small", "{text: hi}"))).status_code == 201
    alone = [(await _timed_run(stack, other, "small", {}))[0] for _ in range(rounds)]
    print(f"small run of another organization, median of {rounds}, ms: alone {statistics.median(alone):.0f}")
    # the probes that fail before any call hold only the worker; the others call the echo tool too
    before_call = [(n, inputs) for n, _, inputs, expected in FAILED if expected[0] is not None]
    every = [(n, inputs) for n, _, inputs, _ in FAILED]
    for label, mix in (("failing before any call", before_call), ("every failing probe", every)):
        alongside = []
        for _ in range(rounds):
            # started together; only the small run is polled (polling a run queries its workflow too)
            started = await asyncio.gather(
                *(stack.start_run(hostile, names[n], inputs) for n, inputs in mix * 2),
                _timed_run(stack, other, "small", {}),
            )
            *run_ids, (ms, _) = started
            alongside.append(ms)
            for run_id in run_ids:
                await stack.final(hostile, run_id, timeout_s=120)
        print(f"  alongside {len(mix) * 2} runs {label}: {statistics.median(alongside):.0f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench hostile_routines")
    parser.add_argument("--rounds", type=int, default=5, help="small runs alone and alongside (default 5)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engine")]
    from realstack import start_routine_stack
    from temporalio.common import SearchAttributeKey
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    async def run() -> None:
        temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal,
            data_converter=pydantic_data_converter,
            search_attributes=[SearchAttributeKey.for_keyword(n) for n in ("B3osRoutine", "B3osOrg")],
        )
        root = Path(tempfile.mkdtemp(prefix="b3os-bench-hostile-"))
        stack = start_routine_stack(root, env)
        try:
            await _bench(stack, args.rounds)
        finally:
            stack.stop()
            await env.shutdown()
            shutil.rmtree(root, ignore_errors=True)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
