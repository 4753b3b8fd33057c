"""A hostile corpus: routines a careless or hostile author could write with only a `routines:run` key.

Each ends in a clear validation error (`file:line:column: message`, 400 from POST /v1/routines) or a
failed run whose error names the step, the field and the problem, on the real stack of
tests/realstack.py (api processes, Temporal, a worker process, a node running the echo tool), within
the test's own timeout; a small run of another organization started alongside still succeeds.
How long each probe holds the workflow's thread is measured in bench/hostile_routines.py.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import loopback
import pytest
from realstack import FREE_ECHO, RoutineStack
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from test_workflow import _sleepers

from engine import step_calls
from engine.routine import RetryPolicy
from engine.runs import RunRoutineInput
from engine.step_calls import retry_policy
from engine.steps import CallActionInput, CallActionResult
from engine.validate import RoutineError, load_routine
from engine.workflow import RoutineWorkflow

PLUS_300 = "+".join(["1"] * 300)
PARENS_100 = "(" * 100 + "1" + ")" * 100
LIST_100_000 = "[" + ",".join(["1"] * 100_000) + "]"
LIST_984 = ",".join(["1"] * 984)


def one_step(name: str, with_: str, *, inputs: str = "", extra: str = "") -> str:
    """A routine of one free echo step; `with_` is the step's with: mapping, as YAML flow."""
    head = f"name: {name}\n" + (f"inputs:\n{inputs}" if inputs else "")
    return f"{head}steps:\n  - id: a\n    uses: {FREE_ECHO}\n{extra}    with: {with_}\n"


REFUSED = [
    (
        "plus-300",
        one_step("plus-300", f"{{text: '${{{{ string({PLUS_300}) }}}}'}}"),
        5,
        "nests more than 32 levels",
    ),
    (
        "parens-100",
        one_step("parens-100", f"{{text: '${{{{ string({PARENS_100}) }}}}'}}"),
        5,
        "nests more than 32",
    ),
    (
        "expression-200kb",
        one_step("expression-200kb", "{text: '${{ string(" + "+".join(["1"] * 100_000) + ") }}'}"),
        5,
        "more than the 2,000 one expression may have",
    ),
    (
        "literal-100000",
        one_step("literal-100000", f"{{text: '${{{{ string(size({LIST_100_000})) }}}}'}}"),
        5,
        "more than the 8,000 one field may have",
    ),
    (
        "foreach-literal-100000",
        one_step(
            "foreach-literal-100000", "{text: '${{ string(item) }}'}", extra=f"    foreach: {LIST_100_000}\n"
        ),
        5,
        "a routine holds at most 50,000 values (keys, texts, numbers, lists and maps); this one holds more",
    ),
    (
        "expressions-160kb",  # 80 different expressions of 2,000 characters: ~18 s to parse
        "name: expressions-160kb\nsteps:\n"
        + "".join(
            f"  - id: s{i}\n    uses: {FREE_ECHO}\n    with: {{"
            + ", ".join(f"t{k}: '${{{{ size([{i * 4 + k},{LIST_984}]) }}}}'" for k in range(4))
            + "}\n"
            for i in range(20)
        ),
        17,
        "step 's4': with: the routine's expressions pass here the 32,000 characters one routine may have",
    ),
    (
        "macros-4-deep",
        one_step(
            "macros-4-deep",
            "{text: '${{ string(inputs.l.map(a, inputs.l.map(b, inputs.l.map(c, inputs.l.map(d, d))))) }}'}",
            inputs="  l: {type: array}\n",
        ),
        7,
        "nests more than 3 macros",
    ),
    ("surrogate-in-yaml", one_step("surrogate-in-yaml", '{text: "a\\ud800b"}'), 5, "the text is not Unicode"),
]


@pytest.mark.parametrize(("name", "source", "line", "message"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_a_hostile_routine_is_refused_at_its_line_with_a_sentence(
    routine_stack: RoutineStack, name: str, source: str, line: int, message: str
) -> None:
    answer = await routine_stack.store(routine_stack.runner(), source)
    assert answer.status_code == 400, answer.text
    problems = answer.json()["error"]["problems"]
    assert any(p.startswith(f"routine.yaml:{line}:") and message in p for p in problems), problems
    assert all(len(p) < 600 for p in problems)  # a 200 KB expression is not echoed back whole


def chain_of_files(name: str, outputs: str) -> str:
    """Ten steps, each passing a file (the input `f`, then the step before's) to the echo tool."""
    sources = ["inputs.f"] + [f"steps.s{i}.output.file" for i in range(9)]
    steps = "".join(
        f"  - id: s{i}\n    uses: {FREE_ECHO}\n    with: {{text: t{i}, file: '${{{{ {source} }}}}'}}\n"
        for i, source in enumerate(sources)
    )
    return f"name: {name}\ninputs:\n  f: {{type: object}}\nsteps:\n{steps}outputs:\n{outputs}"


def file_of(kib: int) -> dict[str, Any]:
    return {"$bytes": base64.b64encode(os.urandom(kib * 1000)).decode(), "name": "f.bin"}


DEEP_60: Any = 1
for _ in range(60):
    DEEP_60 = [DEEP_60]
FILES = ", ".join(f"steps.s{i}.output.file" for i in range(10))

FAILED = [
    (
        "nested-macros-over-3000",
        one_step(
            "nested-macros",
            "{text: '${{ string(size(inputs.l.map(x, inputs.l.map(y, x * y)))) }}'}",
            inputs="  l: {type: array}\n",
        ),
        {"l": list(range(3000))},
        ("a", "expression_failed", "with", "took more than 5,000 evaluation steps"),
    ),
    (
        "surrogate-in-with",
        one_step("surrogate-with", "{text: '${{ \"\\ud800\" }}'}"),
        {},
        ("a", "expression_failed", "with", "not Unicode (a lone surrogate"),
    ),
    (
        "surrogate-in-outputs",
        one_step("surrogate-outputs", "{text: x}") + "outputs:\n  o: '${{ \"\\udc00\" }}'\n",
        {},
        (None, "expression_failed", "outputs", "not Unicode (a lone surrogate"),
    ),
    (
        "deep-result",
        one_step("deep-result", "{text: x}", inputs="  d: {type: array}\n")
        + "outputs:\n  o: '${{ [[[[[[inputs.d]]]]]] }}'\n",
        {"d": DEEP_60},
        (None, "expression_failed", "outputs", "nests lists and maps deeper than 64 levels"),
    ),
    (
        "with-over-1-mib",
        one_step(
            "big-with",
            "{text: '${{ inputs.s }}', file: {$bytes: '${{ inputs.s }}', name: f.txt}}",
            inputs="  s: {type: string}\n",
        ),
        {"s": "a" * 600_000},
        ("a", "payload_too_large", "with", "with: is 1.14 MiB encoded, more than the 1 MiB it may take"),
    ),
    (
        "foreach-10001",
        one_step(
            "many",
            "{text: '${{ string(item) }}'}",
            inputs="  l: {type: array}\n",
            extra="    foreach: ${{ inputs.l }}\n",
        ),
        {"l": list(range(10_001))},
        ("a", "too_many_items", "foreach", "foreach gives 10,001 items; a step runs at most 10,000"),
    ),
    (
        "files-through-10-steps",
        chain_of_files("files-out", f"  files: '${{{{ [{FILES}] }}}}'\n"),
        {"f": file_of(250)},
        (
            None,
            "payload_too_large",
            "outputs",
            "more than the 1 MiB it may take; the largest is outputs.files (3.18 MiB)",
        ),
    ),
    (
        "spliced-text-of-files",
        chain_of_files(
            "files-text",
            "  all: '" + "".join(f'${{{{ steps.s{i}.output.file["$bytes"] }}}}' for i in range(10)) + "'\n",
        ),
        {"f": file_of(250)},
        (None, "expression_failed", "outputs", "longer than 1,048,576 characters"),
    ),
]


@pytest.mark.parametrize(("name", "source", "inputs", "expected"), FAILED, ids=[f[0] for f in FAILED])
async def test_a_hostile_run_fails_with_the_step_the_field_and_a_sentence(
    routine_stack: RoutineStack, name: str, source: str, inputs: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    step, code, reason, sentence = expected
    run = await routine_stack.run(routine_stack.runner(), source, inputs)
    assert run["status"] == "failed", run["error"]
    error = run["error"]
    assert (error["step"], error["code"], error["reason"]) == (step, code, reason), error
    assert sentence in error["message"], error["message"]
    if step is not None:
        assert run["steps"][step]["error"]["message"] == error["message"]


async def test_a_run_input_over_1_mib_is_refused_at_start_naming_the_input(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = one_step("big-input", "{text: '${{ string(size(inputs.l)) }}'}", inputs="  l: {type: array}\n")
    assert (await routine_stack.store(org, source)).status_code == 201
    async with loopback.async_client(base_url=routine_stack.url, timeout=60) as http:
        answer = await http.post(
            "/v1/routines/big-input/runs", json={"inputs": {"l": [1] * 900_000}}, headers=org.headers
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["field"] == "inputs.l"
    assert (
        error["message"]
        == "The inputs cannot run: input 'l' is 1.72 MiB encoded, more than the 1 MiB it may take."
    )
    # each under the bound, together over it: the largest is named
    source = one_step("two-inputs", "{text: x}", inputs="  a: {type: string}\n  b: {type: string}\n")
    assert (await routine_stack.store(org, source)).status_code == 201
    async with loopback.async_client(base_url=routine_stack.url, timeout=60) as http:
        answer = await http.post(
            "/v1/routines/two-inputs/runs",
            json={"inputs": {"a": "a" * 500_000, "b": "b" * 600_000}},
            headers=org.headers,
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["field"], error["message"]) == (
        "inputs.b",
        "The inputs cannot run: the run's inputs is 1.05 MiB encoded, more than the 1 MiB it may take; "
        "the largest is input 'b' (585.94 KiB).",
    )


async def test_outputs_too_large_for_the_runs_result_are_still_in_the_finished_run(
    routine_stack: RoutineStack,
) -> None:
    sent = file_of(250)
    each = (
        f"  - id: each\n    uses: {FREE_ECHO}\n    foreach: [x, y, z]\n"
        "    with: {text: '${{ item }}', file: '${{ steps.s9.output.file }}'}\n"
    )
    source = chain_of_files("files-kept", "  last: ${{ steps.s9.output.file.name }}\n")
    run = await routine_stack.run(
        routine_stack.runner(), source.replace("outputs:", each + "outputs:"), {"f": sent}
    )
    assert run["status"] == "succeeded", run["error"]
    assert run["outputs"] == {"last": "f.bin"}
    # ten outputs of 333 KB and a foreach of three: the workflow's result carried the first; GET has every
    # one, read from the history once the run had ended
    file = {**sent, "bytes": 250_000, "contentType": "application/octet-stream"}
    for i in range(10):
        assert run["steps"][f"s{i}"]["output"] == {"text": f"t{i}", "file": file}
    assert run["steps"]["each"]["output"] == [{"text": t, "file": file} for t in "xyz"]
    assert [sid for sid, step in run["steps"].items() if "output_bytes" in step] == [
        *(f"s{i}" for i in range(1, 10)),
        "each",
    ]


HOSTILE_MIX = [
    (source.replace("name: ", f"name: mix{k}-", 1), inputs)
    for k in range(3)
    for name, source, inputs, _ in FAILED
    if name in ("nested-macros-over-3000", "with-over-1-mib", "foreach-10001")
]


async def test_a_small_run_of_another_organization_succeeds_alongside_hostile_runs(
    routine_stack: RoutineStack,
) -> None:
    hostile, other = routine_stack.runner(), routine_stack.runner()
    small = one_step("small", "{text: '${{ inputs.who }}'}", inputs="  who: {type: string}\n")

    async def one(org: Any, source: str, inputs: dict[str, Any]) -> dict[str, Any]:
        return await routine_stack.run(org, source, inputs)

    runs = await asyncio.gather(
        *(one(hostile, source, inputs) for source, inputs in HOSTILE_MIX),
        one(other, small, {"who": "ann"}),
    )
    *failed, ok = runs
    assert ok["status"] == "succeeded" and ok["steps"]["a"]["output"] == {"text": "ann"}, ok
    assert [r["status"] for r in failed] == ["failed"] * len(HOSTILE_MIX)


async def test_a_step_waiting_on_a_429_says_so_in_the_run_and_in_the_cli(
    routine_stack: RoutineStack, tmp_path: Path
) -> None:
    # The org's 4 calls at once are taken by sleepers sent through an api whose call overhead is 1 s, so
    # the step's call gets a real 429 concurrency_limited with a Retry-After of a few seconds. They hold
    # the slots 5 s, the fail action's own timeout (a longer timeout_ms is cut to it), so the CLI does
    # everything it can before them: it starts (its interpreter and modules), checks and stores the
    # routine (in the api's checker, a process at a lower priority), says so and waits; the sleepers are
    # then sent, and only the run's start is left within their 5 s (when the CLI's store came after them,
    # under `make test` it once took more than the 5 s, and the step was never refused).
    url, proc = routine_stack.start_api(extra_env={"B3OS_CALL_OVERHEAD_S": "1"}, listed=False)
    org = routine_stack.runner()
    (tmp_path / "busy.yaml").write_text(
        f"name: busy\nsteps:\n  - id: echo\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=routine_stack.url, B3OS_API_KEY=org.key)
    try:
        async with loopback.async_client(timeout=30) as client:
            cli = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CLI_ON_GO, "routine", "run", "busy.yaml", cwd=tmp_path, env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert cli.stdin is not None and cli.stdout is not None
            assert await cli.stdout.readline() == b"ready\n"
            cli.stdin.write(b"go\n")
            await cli.stdin.drain()
            assert await cli.stdout.readline() == b"stored\n"
            sleepers = await _sleepers(
                routine_stack, client, routine_stack.add_key(org), url, 4, timeout_ms=5_000
            )
            cli.stdin.write(b"go\n")
            await cli.stdin.drain()
            first = (await cli.stdout.readline()).decode()
            run_id = re.fullmatch(r"run (\S+) of busy started\n", first)
            assert run_id is not None, first
            retrying = None
            while retrying is None:
                run = await routine_stack.read(org, run_id.group(1))
                assert run["status"] == "running", run
                retrying = run["steps"]["echo"].get("retrying")
                await asyncio.sleep(0.1)
            rest, err = await asyncio.wait_for(cli.communicate(), timeout=60)
            await asyncio.gather(*sleepers)
    finally:
        proc.stop()
    # attempt 2 is meant to be seen; on a busy machine its wait can pass between two reads (a Retry-After
    # of 1 s when the sleepers were admitted late), and a later attempt is seen waiting instead
    assert retrying["attempt"] >= 2, retrying
    assert (retrying["code"], retrying["status"]) == ("concurrency_limited", 429)
    assert retrying["retry_after"] > 0 and 0 <= retrying["retry_in_s"] <= retrying["retry_after"]
    assert retrying["item"] is None and retrying["message"]
    assert cli.returncode == 0, err.decode()
    lines = rest.decode().splitlines()
    # Retry-After says when a slot is expected to free: a step may be told to wait more than once
    *waits, done = lines[: next(i for i, line in enumerate(lines) if line.startswith("✓")) + 1]
    told = [
        re.fullmatch(r"… echo: attempt (\d+) after 429 concurrency_limited \(retry in \d s\)", w)
        for w in waits
    ]
    assert waits and all(told), lines
    attempts = [int(m.group(1)) for m in told if m]  # each wait it saw, in order (it polls too)
    assert attempts[0] >= 2 and attempts == sorted(set(attempts)), lines
    finished = re.fullmatch(r'✓ echo \((\d+) attempts\): \{"text": "hi"\}', done)
    assert finished is not None and int(finished.group(1)) >= attempts[-1], lines
    final = await routine_stack.read(org, run_id.group(1))
    assert "retrying" not in final["steps"]["echo"]  # the finished run carries no retry


CLI_ON_GO = """
import sys
import cli.routine_run
from b3os.routines import Routines
from cli.main import main
start_run = Routines.run
def run_on_go(*args, **kwargs):
    print("stored", flush=True)
    sys.stdin.readline()
    return start_run(*args, **kwargs)
Routines.run = run_on_go
print("ready", flush=True)
sys.stdin.readline()
sys.exit(main(sys.argv[1:]))
"""
"""`python -m cli ARGS` once a line comes on stdin (the CLI's interpreter and modules start before), and
a routine's run started once another line comes (after the CLI has checked and stored the routine, and
said `stored`)."""


def test_literal_values_over_their_payload_limits_are_refused_by_the_validator() -> None:
    big = "x" * 1_100_000  # a local file: the api takes routines of 512 KiB at most
    source = one_step("big-literals", f"{{text: {big}}}") + f"outputs:\n  o: {big}\n"
    with pytest.raises(RoutineError) as info:
        load_routine(source, "big.yaml")
    assert info.value.lines() == [
        "big.yaml:5:11: step 'a': with: is 1.05 MiB encoded, more than the 1 MiB it may take",
        "big.yaml:7:3: outputs is 1.05 MiB encoded, more than the 1 MiB it may take",
    ]


def test_a_retry_policy_temporal_would_refuse_is_a_sentence_not_a_failing_task() -> None:
    # The validator refuses these first; the workflow turns one into the step's `retry_invalid`.
    bad = RetryPolicy.model_construct(
        max_attempts=3, backoff="10s", backoff_coefficient=2.0, max_backoff="1s"
    )
    with pytest.raises(ValueError, match=r"max-backoff \(0:00:01\) is shorter than backoff \(0:00:10\)"):
        retry_policy(bad)


async def test_a_run_near_temporals_history_limit_fails_its_step_instead_of_being_terminated(
    temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40,000 events take minutes to make: the budget is lowered to 30 here, on a worker without the
    # sandbox (which would import engine.workflow afresh), with a stand-in for the call (the seam).
    monkeypatch.setattr(step_calls, "HISTORY_EVENTS_BUDGET", 30)

    @activity.defn(name="call_action")
    async def call_action(input: CallActionInput) -> CallActionResult:
        return CallActionResult(output={"text": input.input["text"]})

    routine = load_routine(
        one_step(
            "long",
            "{text: '${{ string(item) }}'}",
            extra="    foreach: ${{ inputs.l }}\n",
            inputs="  l: {type: array}\n",
        )
    )
    queue = f"hostile-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_env.client,
        task_queue=queue,
        workflows=[RoutineWorkflow],
        activities=[call_action],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_env.client.start_workflow(
            RoutineWorkflow.run,
            RunRoutineInput(
                routine=routine, inputs={"l": list(range(40))}, org_id="o", key_id="k", run_id="r"
            ),
            id=queue,
            task_queue=queue,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    error = info.value.cause
    assert isinstance(error, ApplicationError) and error.type == "StepFailed"
    assert error.details[0]["code"] == "history_too_large" and error.details[0]["reason"] == "foreach"
    assert "Temporal ends a run at 51,200 events or 50 MiB, so no more calls start" in error.message
    outputs = error.details[1]["steps"]["a"]["output"]
    assert outputs[:5] == [{"text": str(i)} for i in range(5)] and outputs[-1] is None  # the first items ran
