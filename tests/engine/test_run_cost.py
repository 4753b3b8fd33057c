"""A run's cost ceiling on the session's real stack (tests/realstack.py): `POST /v1/routines/{name}/estimate`,
`max_cost_microusd` on a run start, the api's stop at a step's call, and `b3os routine cost` as a user runs
it, all held against the usage ledger (`GET /v1/usage`).

The stack's prices are the api's defaults: a vCPU-ms 0.00000002 USD, a GiB-ms 0.0000000025 USD, a tool
call's floor 10 micro-USD; echo (`com.example.tools/echo`) costs 100 micro-USD a call, `echo` and `noop`
time out at 10 s, `fail` at 5 s. So one attempt of an echo call costs at most
ceil((11,000 vCPU-ms x 20,000 + 5,500 GiB-ms x 2,500) pico-USD) = 234 of compute (its 10 s and 1 s of
slack, at 1 vCPU and 512 MiB), plus the floor: 244, and its price once: a call with 3 attempts, 832.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import loopback
from calls.calltest import usage
from calls.stack import Org
from realstack import ECHO_REF, FAIL_REF, RoutineStack

REPO = Path(__file__).resolve().parents[2]
HELLO = (REPO / "examples" / "routines" / "hello.yaml").read_text()
ECHO_ATTEMPT = 234 + 10  # compute and floor of one attempt of an echo call at most
ECHO_CALL = 3 * ECHO_ATTEMPT + 100  # three attempts, the price once: 832
HELLO_CEILING = 7 * ECHO_CALL  # greet, again, last, three friends, done: 5,824


async def _post(stack: RoutineStack, org: Org, path: str, body: dict[str, Any]) -> Any:
    async with loopback.async_client(base_url=stack.url, timeout=60) as http:
        return await http.post(path, json=body, headers=org.headers)


async def _stored(stack: RoutineStack, source: str) -> Org:
    org = stack.runner()
    stored = await stack.store(org, source)
    assert stored.status_code == 201, stored.text
    return org


async def test_the_ceiling_is_each_steps_call_times_its_attempts_and_items(
    routine_stack: RoutineStack,
) -> None:
    org = await _stored(routine_stack, HELLO)
    r = await _post(routine_stack, org, "/v1/routines/hello/estimate", {"inputs": {}})
    assert r.status_code == 200, r.text
    estimate = r.json()
    assert estimate["ceiling_microusd"] == HELLO_CEILING and estimate["unbounded"] == []
    greet, *_, friends, done = estimate["steps"]
    assert greet == {
        "id": "greet",
        "ref": "com.example.tools/echo/echo@1.0.0",
        "tier": "vm",
        "timeout_ms": 10_000,
        "attempts": 3,
        "items": 1,
        "items_from": "step",
        "call": {"compute": 234, "floor": 10, "price": 100, "total": 344},
        "ceiling_microusd": ECHO_CALL,
        "note": None,
    }
    # the default list of three friends; done is noop@1 of the same priced pack
    assert (friends["items"], friends["items_from"], friends["ceiling_microusd"]) == (
        3,
        "inputs",
        3 * ECHO_CALL,
    )
    assert done["ref"] == "com.example.tools/echo/noop@1.0.0" and done["ceiling_microusd"] == ECHO_CALL
    # the inputs' own list counts
    r = await _post(routine_stack, org, "/v1/routines/hello/estimate", {"inputs": {"friends": list("abcde")}})
    assert r.json()["ceiling_microusd"] == 9 * ECHO_CALL
    r = await _post(routine_stack, org, "/v1/routines/hello/estimate", {"inputs": {"friends": "ann"}})
    assert r.status_code == 400 and r.json()["error"]["field"] == "inputs", r.text


async def test_a_real_run_costs_no_more_than_its_ceiling_in_the_usage_ledger(
    routine_stack: RoutineStack,
) -> None:
    org = await _stored(routine_stack, HELLO)
    r = await _post(
        routine_stack, org, "/v1/routines/hello/runs", {"inputs": {}, "max_cost_microusd": HELLO_CEILING}
    )
    assert r.status_code == 201, r.text
    run = await routine_stack.final(org, r.json()["run_id"])
    assert run["status"] == "succeeded" and run["max_cost_microusd"] == HELLO_CEILING
    ledger = usage(routine_stack, org)
    assert ledger["calls"] == 7
    assert 7 * (10 + 100) < ledger["cost"]["total"] <= HELLO_CEILING
    for call in routine_stack.calls_of(org):  # each call under its own ceiling, held while it ran
        assert call.run_id == run["run_id"] and call.total <= call.ceiling_microusd == 344


async def test_each_charged_attempt_of_a_retried_step_counts(routine_stack: RoutineStack) -> None:
    source = f"""\
name: flaky
steps:
  - id: flaky
    uses: {FAIL_REF}
    continue-on-error: true
    retry: {{max-attempts: 3, backoff: 1s}}
    with: {{mode: tool_error, code: busy, message: try again, retryable: true}}
"""
    org = await _stored(routine_stack, source)
    estimate = (await _post(routine_stack, org, "/v1/routines/flaky/estimate", {})).json()
    # fail@1 times out at 5 s: compute ceil(6,000 x 20,000 + 3,000 x 2,500 pico-USD) = 128
    assert estimate["steps"][0]["call"] == {"compute": 128, "floor": 10, "price": 100, "total": 238}
    assert estimate["ceiling_microusd"] == 3 * (128 + 10) + 100
    r = await _post(
        routine_stack, org, "/v1/routines/flaky/runs", {"max_cost_microusd": estimate["ceiling_microusd"]}
    )
    assert r.status_code == 201, r.text
    run = await routine_stack.final(org, r.json()["run_id"])
    assert run["steps"]["flaky"]["attempts"] == 3 and run["steps"]["flaky"]["status"] == "failed"
    ledger = usage(routine_stack, org)
    # each attempt ran the tool again and was charged its compute and floor, never the price
    assert ledger["calls"] == 3 and ledger["cost"]["price"] == 0
    assert 3 * 10 < ledger["cost"]["total"] <= estimate["ceiling_microusd"]


async def test_a_start_whose_ceiling_is_above_its_max_is_refused_and_charges_nothing(
    routine_stack: RoutineStack,
) -> None:
    org = await _stored(routine_stack, HELLO)
    r = await _post(
        routine_stack, org, "/v1/routines/hello/runs", {"inputs": {}, "max_cost_microusd": HELLO_CEILING - 1}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"], error["reason"]) == (
        "invalid_request",
        "max_cost_microusd",
        "max_cost",
    )
    assert error["ceiling_microusd"] == HELLO_CEILING and error["unbounded"] == []
    assert error["message"] == (
        f"max_cost_microusd {HELLO_CEILING - 1}: the run can cost up to {HELLO_CEILING} micro-USD "
        "(POST /v1/routines/hello/estimate gives each step's part), more than its max, so it was not started "
        "and nothing was charged."
    )
    async with loopback.async_client(base_url=routine_stack.url) as http:
        assert (await http.get("/v1/runs", headers=org.headers)).json()["runs"] == []
    assert usage(routine_stack, org)["calls"] == 0
    r = await _post(routine_stack, org, "/v1/routines/hello/runs", {"max_cost_microusd": -1})
    assert r.status_code == 400 and r.json()["error"]["field"] == "max_cost_microusd", r.text


FROM_A_STEP = f"""\
name: from-a-step
inputs:
  names: {{type: array, items: {{type: string}}, maxItems: 4}}
steps:
  - id: list
    uses: {ECHO_REF}
    with: {{text: "a b c"}}
  - id: each
    uses: {ECHO_REF}
    foreach: ${{{{ [steps.list.output.text] }}}}
    with: {{text: "${{{{ item }}}}"}}
  - id: named
    uses: {ECHO_REF}
    needs: []
    foreach: ${{{{ inputs.names }}}}
    with: {{text: "${{{{ item }}}}"}}
"""


async def test_a_foreach_of_unknown_length_is_unbounded_and_a_max_refuses_the_run(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()  # the YAML is estimated as sent, never stored
    body = {"yaml": FROM_A_STEP, "inputs": {}}
    r = await _post(routine_stack, org, "/v1/routines/from-a-step/estimate", body)
    assert r.status_code == 200, r.text
    estimate = r.json()
    assert estimate["ceiling_microusd"] is None and estimate["unbounded"] == ["each"]
    listing, each, named = estimate["steps"]
    assert (each["items"], each["items_from"], each["ceiling_microusd"]) == (None, "unbounded", None)
    assert each["note"] == (
        "foreach: [steps.list.output.text] reads steps.list: its list is known only when the run gets there"
    )
    # an input not given: its maxItems bounds the list
    assert (named["items"], named["items_from"], named["ceiling_microusd"]) == (4, "max_items", 4 * ECHO_CALL)
    async with loopback.async_client(base_url=routine_stack.url) as http:
        assert (await http.get("/v1/routines/from-a-step", headers=org.headers)).status_code == 404
    r = await _post(routine_stack, org, "/v1/routines/other/estimate", body)
    assert r.status_code == 400 and r.json()["error"]["field"] == "yaml", r.text
    r = await _post(routine_stack, org, "/v1/routines/from-a-step/estimate", {**body, "inputs": {"nope": 1}})
    assert r.status_code == 400 and r.json()["error"]["field"] == "inputs.nope", r.text

    await _stored_as(routine_stack, org, FROM_A_STEP)
    r = await _post(
        routine_stack,
        org,
        "/v1/routines/from-a-step/runs",
        {"inputs": {"names": []}, "max_cost_microusd": 10**9},
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["unbounded"] == ["each"] and error["ceiling_microusd"] is None
    assert error["message"].startswith(
        "max_cost_microusd 1000000000: the run's cost has no bound (step each: "
    )
    assert usage(routine_stack, org)["calls"] == 0


async def _stored_as(stack: RoutineStack, org: Org, source: str) -> None:
    stored = await stack.store(org, source)
    assert stored.status_code == 201, stored.text


THREE = f"""\
name: three
steps:
  - {{id: first, uses: {ECHO_REF}, retry: {{max-attempts: 1}}, with: {{text: one}}}}
  - {{id: second, uses: {ECHO_REF}, retry: {{max-attempts: 1}}, with: {{text: two}}}}
  - {{id: third, uses: {ECHO_REF}, retry: {{max-attempts: 1}}, with: {{text: three}}}}
"""


async def test_a_call_that_could_take_its_run_past_its_max_stops_the_run_naming_the_step(
    routine_stack: RoutineStack,
) -> None:
    """The api's own stop, mid-run: the run starts within its max at the api's prices (3 calls of at most 344
    micro-USD), then its calls reach an api whose floor was raised to 500 micro-USD (an operator's new
    prices, say): each call may now cost 834, so the second could take the run past its max."""
    queue = f"{routine_stack.queue}-cost"
    starter, starter_proc = routine_stack.start_api(
        extra_env={"B3OS_TEMPORAL_TASK_QUEUE": queue}, listed=False
    )
    dearer, dearer_proc = routine_stack.start_api(
        extra_env={"B3OS_TEMPORAL_TASK_QUEUE": queue, "B3OS_PRICE_TOOL_CALL_USD": "0.0005"}, listed=False
    )
    worker = routine_stack.start_worker(queue=queue, api_url=dearer)
    try:
        org = await _stored(routine_stack, THREE)
        async with loopback.async_client(base_url=starter, timeout=60) as http:
            r = await http.post(
                "/v1/routines/three/runs", json={"max_cost_microusd": 1032}, headers=org.headers
            )
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        run = await routine_stack.final(org, run_id, url=starter)
    finally:
        for proc in (worker, dearer_proc, starter_proc):
            proc.stop()
    assert run["status"] == "failed", run
    steps = run["steps"]
    assert [steps[s]["status"] for s in ("first", "second", "third")] == ["succeeded", "failed", "skipped"]
    charged = usage(routine_stack, org)["cost"]["total"]
    assert 600 < charged <= 1032  # the first call ran at the new prices; the run stays within its max
    error = run["error"]
    assert (error["step"], error["code"], error["reason"]) == ("second", "forbidden", "max_cost")
    assert error["message"] == (
        f"Run {run_id} stopped at step second: its call may cost up to 834 micro-USD, which with the "
        f"{charged} micro-USD the run's calls were charged so far could take the run past its "
        "max_cost_microusd of 1032; the call was not made."
    )
    (call,) = routine_stack.calls_of(org)
    assert call.run_id == run_id and call.ceiling_microusd == 834


async def _b3os(stack: RoutineStack, org: Org, cwd: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=org.key)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_routine_cost_prints_each_steps_part_and_the_ceiling(
    routine_stack: RoutineStack, tmp_path: Path
) -> None:
    org = routine_stack.runner()
    hello = str(REPO / "examples" / "routines" / "hello.yaml")
    code, out, err = await _b3os(
        routine_stack, org, tmp_path, "routine", "cost", hello, "--inputs", '{"friends": ["a"]}'
    )
    assert code == 0, err
    assert out.splitlines() == [
        "the most a run of hello can cost, in micro-USD (1 USD = 1,000,000):",
        "  step     ref                                calls       attempts  attempt  price  most",
        "  greet    com.example.tools/echo/echo@1.0.0  1                  3      244    100   832",
        "  again    com.example.tools/echo/echo@1.0.0  1                  3      244    100   832",
        "  last     com.example.tools/echo/echo@1.0.0  1                  3      244    100   832",
        "  friends  com.example.tools/echo/echo@1.0.0  1 (inputs)         3      244    100   832",
        "  done     com.example.tools/echo/noop@1.0.0  1                  3      244    100   832",
        "  (attempt: an attempt's compute for its whole time and its floor; price: once, by the attempt that "
        "succeeds; most: calls x (attempts x attempt + price))",
        "in all: at most 4,160 micro-USD (0.004160 USD)",
    ]
    (tmp_path / "from-a-step.yaml").write_text(FROM_A_STEP)
    code, out, err = await _b3os(routine_stack, org, tmp_path, "routine", "cost", "from-a-step.yaml")
    assert code == 0, err
    assert "  each   com.example.tools/echo/echo@1.0.0  unbounded " in out
    assert (
        "  named  com.example.tools/echo/echo@1.0.0  4 (max items)         3      244    100      3,328"
        in out
    )
    assert "  each: foreach: [steps.list.output.text] reads steps.list: its list is known only" in out
    assert out.splitlines()[-1] == "in all: unbounded (step each)"
    assert usage(routine_stack, org)["calls"] == 0  # nothing stored, nothing run


async def test_a_run_of_the_priced_foreach_example_stays_under_what_routine_cost_prints(
    routine_stack: RoutineStack, tmp_path: Path
) -> None:
    """The issue's Done-when: `b3os routine cost examples/routines/hello.yaml` prints a ceiling that a real
    run stays under (the usage ledger); `b3os routine run --max-cost` refuses a max below it, runs at it."""
    org = routine_stack.runner()
    hello = str(REPO / "examples" / "routines" / "hello.yaml")
    code, out, err = await _b3os(routine_stack, org, tmp_path, "routine", "cost", hello)
    assert code == 0, err
    assert out.splitlines()[-1] == "in all: at most 5,824 micro-USD (0.005824 USD)"
    assert "  friends  com.example.tools/echo/echo@1.0.0  3 (inputs)         3      244    100  2,496" in out
    code, out, err = await _b3os(routine_stack, org, tmp_path, "routine", "run", hello, "--max-cost", "5823")
    assert code == 1 and out == ""
    assert err == (
        "b3os routine run: max_cost_microusd 5823: the run can cost up to 5824 micro-USD (POST "
        "/v1/routines/hello/estimate gives each step's part), more than its max, so it was not started and "
        "nothing was charged. (400 invalid_request)\n"
    )
    assert usage(routine_stack, org)["calls"] == 0
    code, out, err = await _b3os(routine_stack, org, tmp_path, "routine", "run", hello, "--max-cost", "5824")
    assert code == 0, err
    ledger = usage(routine_stack, org)
    assert ledger["calls"] == 7 and 0 < ledger["cost"]["total"] <= 5824
