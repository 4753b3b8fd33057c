"""Re-runs and routine versions on the real stack (tests/realstack.py): a re-run keeps the steps before
its point without calling or charging them, runs the rest under its own keys, runs the routine version
the old run ran, and names the run it re-ran (runs API, Temporal search attribute, `b3os run`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx
import loopback
from calls.stack import PRICEY
from realstack import FREE_ECHO, FREE_FAIL, RUNNER_SCOPES, RoutineStack

from activities.idempotency import step_idempotency_key

PRICEY_ECHO = f"{PRICEY}/echo@1"
USD = 1_000_000

PRICED = f"""\
name: priced
inputs:
  who: {{type: string, default: ann}}
steps:
  - id: a
    uses: {PRICEY_ECHO}
    with: {{text: "a ${{{{ inputs.who }}}}"}}
  - id: b
    uses: {PRICEY_ECHO}
    with: {{text: "b ${{{{ steps.a.output.text }}}}"}}
  - id: c
    uses: {FREE_FAIL}
    with: {{mode: exit, exitCode: 3}}
  - id: d
    needs: [c]
    if: ${{{{ always() }}}}
    uses: {PRICEY_ECHO}
    with: {{text: "d after ${{{{ steps.b.output.text }}}}"}}
outputs:
  b: ${{{{ steps.b.output.text }}}}
"""


def _post(stack: RoutineStack, path: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    return loopback.post(f"{stack.url}{path}", headers=headers, json=body, timeout=30)


def _get(stack: RoutineStack, path: str, headers: dict[str, str]) -> httpx.Response:
    return loopback.get(f"{stack.url}{path}", headers=headers, timeout=30)


def _usage(stack: RoutineStack, headers: dict[str, str]) -> dict[str, Any]:
    r = _get(stack, "/v1/usage", headers)
    assert r.status_code == 200, r.text
    units: dict[str, Any] = r.json()["units"]
    return units


async def test_a_rerun_keeps_the_succeeded_priced_steps_and_charges_only_the_steps_it_runs(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    old = await routine_stack.run(org, PRICED, {"who": "bo"})
    assert old["status"] == "failed" and old["error"]["step"] == "c"
    assert [old["steps"][s]["status"] for s in "abcd"] == ["succeeded", "succeeded", "failed", "succeeded"]
    before = _usage(routine_stack, org.headers)
    assert before["actions.publisher_microusd"] == 3 * USD  # a, b and d

    answer = _post(routine_stack, f"/v1/runs/{old['run_id']}/rerun", org.headers, {})
    assert answer.status_code == 201, answer.text
    new = await routine_stack.final(org, answer.json()["run_id"])

    assert new["rerun_of"] == old["run_id"] and new["routine_hash"] == old["routine_hash"]
    assert new["inputs"] == old["inputs"] == {"who": "bo"}
    for kept in "ab":
        assert new["steps"][kept] == {**old["steps"][kept], "reused": True}
    assert new["steps"]["c"]["status"] == "failed" and new["steps"]["d"]["status"] == "succeeded"
    assert new["steps"]["d"]["output"] == {"text": "d after b a bo"}
    after = _usage(routine_stack, org.headers)
    assert after["actions.publisher_microusd"] - before["actions.publisher_microusd"] == USD  # d alone
    assert after["actions.tool_call"] - before["actions.tool_call"] == 2  # c and d, not a nor b
    keys = set(routine_stack.stored_keys(org))
    for step in "cd":
        assert step_idempotency_key(new["workflow_id"], step, None) in keys
    for step in "ab":
        assert step_idempotency_key(new["workflow_id"], step, None) not in keys
    described = await routine_stack.temporal_client.get_workflow_handle(new["workflow_id"]).describe()
    assert described.search_attributes["B3osRerunOf"] == [old["run_id"]]
    listed = {r["run_id"]: r for r in _get(routine_stack, "/v1/runs", org.headers).json()["runs"]}
    assert (listed[new["run_id"]]["rerun_of"], listed[new["run_id"]]["schedule_id"]) == (old["run_id"], None)
    assert listed[old["run_id"]]["rerun_of"] is None

    # from: b keeps a alone: b, c and d run again (b and d charged)
    answer = _post(routine_stack, f"/v1/runs/{old['run_id']}/rerun", org.headers, {"from": "b"})
    assert answer.status_code == 201, answer.text
    again = await routine_stack.final(org, answer.json()["run_id"])
    assert again["steps"]["a"].get("reused") is True and "reused" not in again["steps"]["b"]
    final = _usage(routine_stack, org.headers)
    assert final["actions.publisher_microusd"] - after["actions.publisher_microusd"] == 2 * USD


async def test_a_rerun_runs_the_routine_version_its_run_ran_and_versions_are_listed(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    first = (
        f"name: versioned\nsteps:\n  - id: say\n    uses: {FREE_ECHO}\n    with: {{text: one}}\n"
        f"  - id: fail\n    uses: {FREE_FAIL}\n    with: {{mode: exit, exitCode: 3}}\n"
    )
    old = await routine_stack.run(org, first)
    assert old["status"] == "failed" and old["routine_hash"].startswith("sha256:")
    second = first.replace("text: one", "text: two")
    assert (await routine_stack.store(org, second)).status_code == 201
    assert (await routine_stack.store(org, second)).status_code == 201  # the same YAML: no new version
    versions = _get(routine_stack, "/v1/routines/versioned/versions", org.headers).json()["versions"]
    assert [v["current"] for v in versions] == [True, False]
    assert versions[1]["hash"] == old["routine_hash"] and versions[1]["yaml_bytes"] == len(first)

    answer = _post(routine_stack, f"/v1/runs/{old['run_id']}/rerun", org.headers, {"from": "say"})
    new = await routine_stack.final(org, answer.json()["run_id"])
    assert new["routine_hash"] == old["routine_hash"]
    assert new["steps"]["say"]["output"] == {"text": "one"}  # the old version, not the one stored since
    assert new["steps"]["say"]["ref"] == old["steps"]["say"]["ref"]
    other = routine_stack.org(scopes=RUNNER_SCOPES)
    assert _get(routine_stack, "/v1/routines/versioned/versions", other.headers).status_code == 404


async def test_reruns_that_cannot_start_are_refused_with_a_sentence(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    ok = await routine_stack.run(
        org, f"name: fine\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
    )
    path = f"/v1/runs/{ok['run_id']}/rerun"
    nothing = _post(routine_stack, path, org.headers, {})
    assert nothing.status_code == 409, nothing.text
    assert "has no step that failed" in nothing.json()["error"]["message"]
    unknown = _post(routine_stack, path, org.headers, {"from": "nope"})
    assert unknown.status_code == 400 and unknown.json()["error"]["field"] == "from"
    assert "has no step 'nope' (steps: e)" in unknown.json()["error"]["message"]
    assert _post(routine_stack, path, org.headers, {"from": "e"}).status_code == 201
    assert _post(routine_stack, "/v1/runs/run_nope/rerun", org.headers, {}).status_code == 404
    other = routine_stack.org(scopes=RUNNER_SCOPES)
    assert _post(routine_stack, path, other.headers, {"from": "e"}).status_code == 404
    slow = f"name: slow\nsteps:\n  - id: s\n    uses: {FREE_FAIL}\n    with: {{mode: sleep, seconds: 3}}\n"
    assert (await routine_stack.store(org, slow)).status_code == 201
    running = await routine_stack.start_run(org, "slow")
    busy = _post(routine_stack, f"/v1/runs/{running}/rerun", org.headers, {"from": "s"})
    assert busy.status_code == 409 and "is still running" in busy.json()["error"]["message"]
    await routine_stack.final(org, running)


async def _b3os(stack: RoutineStack, key: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=key)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_b3os_run_rerun_and_show_print_the_rerun_as_routine_run_does(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    old = await routine_stack.run(org, PRICED.replace(PRICEY_ECHO, FREE_ECHO))
    code, out, err = await _b3os(routine_stack, org.key, "run", "rerun", old["run_id"], "--json")
    assert code == 1, err  # c fails again
    new = json.loads(out)
    assert new["rerun_of"] == old["run_id"] and new["status"] == "failed"
    assert new["steps"]["a"]["reused"] is True and new["steps"]["d"]["output"] == {"text": "d after b a ann"}
    # from d: a and b are kept; c failed in the old run, so it runs again (and fails again)
    code, out, err = await _b3os(routine_stack, org.key, "run", "rerun", old["run_id"], "--from", "d")
    assert code == 1 and "step c: tool_failed (exit)" in err
    assert "= a (kept from the run re-run, not called)" in out and "✓ d (1 attempt)" in out
    code, out, _ = await _b3os(routine_stack, org.key, "run", "show", new["run_id"])
    assert code == 1
    assert f"a re-run of {old['run_id']}" in out and "✗ c failed" in out
    code, out, _ = await _b3os(routine_stack, org.key, "run", "show", new["run_id"], "--json")
    assert json.loads(out)["run_id"] == new["run_id"]
    code, _, err = await _b3os(routine_stack, org.key, "run", "rerun", new["run_id"], "--from", "zz")
    assert code == 1 and "has no step 'zz'" in err


def test_a_rerun_keeps_what_succeeded_upstream_of_its_point_and_nothing_that_read_a_step_run_again() -> None:
    from api.runs.rerun import kept_steps
    from engine.routine import Routine
    from engine.runs import RunRoutineResult

    def step(sid: str, needs: list[str] | None) -> dict[str, Any]:
        return {"id": sid, "uses": FREE_ECHO, **({"needs": needs} if needs is not None else {})}

    routine = Routine.model_validate(
        {
            "name": "graph",
            "steps": [
                step("fetch", []),
                step("side", []),
                step("flaky", []),
                step("parse", ["fetch"]),
                step("join", ["parse", "side"]),
                step("after_flaky", ["flaky"]),
            ],
        }
    )
    statuses = {"fetch": "succeeded", "side": "skipped", "flaky": "failed", "parse": "succeeded"}
    statuses |= {"join": "succeeded", "after_flaky": "skipped"}
    result = RunRoutineResult.model_validate(
        {"status": "failed", "steps": {s: {"status": v, "output": {"s": s}} for s, v in statuses.items()}}
    )
    # from parse: parse and join run again; fetch (succeeded) and side (skipped) are kept; flaky failed
    # (runs again), so after_flaky, which it needs, is not kept either
    assert list(kept_steps(routine, result, "parse")) == ["fetch", "side"]
    assert kept_steps(routine, result, "parse")["side"].output is None
    # from flaky: everything that does not need flaky is kept
    assert list(kept_steps(routine, result, "flaky")) == ["fetch", "side", "parse", "join"]
    # without needs, a step needs the one before it: everything after the point runs again
    chain = Routine.model_validate({"name": "chain", "steps": [step(s, None) for s in statuses]})
    assert list(kept_steps(chain, result, "parse")) == ["fetch", "side"]


LARGE = f"""\
name: large
inputs:
  texts: {{type: array, items: {{type: string}}}}
steps:
  - id: a
    foreach: ${{{{ inputs.texts }}}}
    uses: {FREE_ECHO}
    with: {{text: "${{{{ item }}}}"}}
  - id: d
    needs: [a]
    uses: {FREE_FAIL}
    with: {{mode: exit, exitCode: 3}}
  - id: e
    needs: [a]
    uses: {FREE_ECHO}
    with:
      text: "${{{{ string(size(steps.a.output)) }}}} of ${{{{ string(size(steps.a.output[13].text)) }}}}"
"""


async def test_a_rerun_and_its_rerun_keep_an_output_too_large_for_the_runs_result(
    routine_stack: RoutineStack,
) -> None:
    """A foreach's output of 560 KB is left out of the workflow's result (512 KiB in all) and read back from
    the history; a kept step's is read back from the re-run's input, so a re-run of the re-run keeps it.
    Its 14 items' texts are of 4-byte characters, so that its 19 calls stay within the 20 an organization
    starts in a minute before its routine steps' calls are spread half a second apart (api.calls.limits)."""
    org = routine_stack.runner()
    clef = "\U0001d11e"  # 4 bytes in UTF-8
    texts = [f"{i:04d}" + clef * 9_986 for i in range(14)]  # the echo tool takes 10,000 characters a text
    outputs = [{"text": t} for t in texts]
    old = await routine_stack.run(org, LARGE, {"texts": texts})
    assert old["status"] == "failed" and old["error"]["step"] == "d", old["error"]
    assert old["steps"]["a"]["output"] == outputs
    assert old["steps"]["a"]["output_bytes"] > 512 * 1024  # read back from the history
    answer = _post(routine_stack, f"/v1/runs/{old['run_id']}/rerun", org.headers, {})
    assert answer.status_code == 201, answer.text
    new = await routine_stack.final(org, answer.json()["run_id"])
    assert [new["steps"][s].get("reused") for s in "ade"] == [True, None, True]
    assert new["steps"]["a"]["output"] == outputs
    answer = _post(routine_stack, f"/v1/runs/{new['run_id']}/rerun", org.headers, {"from": "e"})
    assert answer.status_code == 201, answer.text
    again = await routine_stack.final(org, answer.json()["run_id"])
    assert again["steps"]["a"].get("reused") is True
    assert again["steps"]["e"]["status"] == "succeeded", again["steps"]["e"]  # it read a's kept output
    assert again["steps"]["e"]["output"] == {"text": "14 of 9990"}
    assert again["steps"]["a"]["output"] == outputs
