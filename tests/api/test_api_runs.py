"""The routines and runs API of a real api process (uvicorn) with a real Temporal dev server, routine
worker process, node and echo packs: the session's stack of tests/realstack.py (SQLite). Storing
routines (their `uses:` resolved in the registry) also runs in process on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apitest
import httpx
import loopback
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from realstack import FREE_ECHO, FREE_FAIL, RUNNER_SCOPES, RoutineStack, no_traceback
from temporalio.testing import WorkflowEnvironment
from workers import PATIENCE_S

from b3os import B3OS
from cli.tool_publish import publish_dir

HELLO = f"""\
name: hello
inputs:
  who: {{type: string}}
  times: {{type: integer, default: 2}}
steps:
  - id: greet
    uses: {FREE_ECHO}
    with: {{text: "hello ${{{{ inputs.who }}}}"}}
  - id: again
    uses: {FREE_ECHO}
    foreach: "${{{{ [1, 2] }}}}"
    with: {{text: "${{{{ steps.greet.output.text }}}} #${{{{ item }}}}"}}
outputs:
  greeting: ${{{{ steps.greet.output.text }}}}
  count: ${{{{ size(steps.again.output) }}}}
"""


def _sleeping(name: str, seconds: int) -> str:
    """A routine `name` of one step, `s`, that sleeps `seconds`."""
    step = f"  - id: s\n    uses: {FREE_FAIL}\n    with: {{mode: sleep, seconds: {seconds}}}\n"
    return f"name: {name}\nsteps:\n{step}"


SLOW = _sleeping("slow", 2)


def _get(stack: RoutineStack, path: str, headers: dict[str, str], **params: Any) -> httpx.Response:
    return loopback.get(f"{stack.url}{path}", headers=headers, params=params, timeout=30)


def _post(stack: RoutineStack, path: str, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    return loopback.post(f"{stack.url}{path}", headers=headers, json=body, timeout=30)


async def test_a_stored_routine_runs_and_its_run_reads_back(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    stored = await routine_stack.store(org, HELLO)
    assert stored.status_code == 201, stored.text
    assert stored.json()["name"] == "hello" and stored.json()["steps"] == ["greet", "again"]
    assert _get(routine_stack, "/v1/routines/hello", org.headers).json()["version"] == 1

    run_id = await routine_stack.start_run(org, "hello", {"who": "ann"})
    run = await routine_stack.final(org, run_id)

    assert run["status"] == "succeeded"
    assert run["inputs"] == {"who": "ann", "times": 2}  # the default filled in
    assert run["outputs"] == {"greeting": "hello ann", "count": 2}
    assert run["steps"]["greet"] == {
        "status": "succeeded",
        "attempts": 1,
        "ref": "com.example.tools/free/echo@1.0.0",
        "output": {"text": "hello ann"},
        "error": None,
    }
    assert run["steps"]["again"]["output"] == [{"text": "hello ann #1"}, {"text": "hello ann #2"}]
    assert {c.key_id for c in routine_stack.calls_of(org)} == {org.key_id}
    listed = _get(routine_stack, "/v1/runs", org.headers).json()["runs"]
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "succeeded")]
    assert _get(routine_stack, "/v1/runs", org.headers, routine="other").json()["runs"] == []


@pytest.mark.parametrize(
    ("uses", "problem"),
    [
        ("com.example.tools/nope/echo@1", "pack com.example.tools/nope is not in the registry"),
        ("com.example.tools/free/echo@2", "com.example.tools/free has no version 2.x.y (versions: 1.0.0)"),
        (
            "com.example.tools/free/echo@1.0.1",
            "com.example.tools/free has no version 1.0.1 (versions: 1.0.0)",
        ),
        (
            "com.example.tools/free/shout@1",
            "com.example.tools/free@1.0.0 has no action 'shout' (actions: noop, echo, fail)",
        ),
    ],
)
async def test_a_routine_whose_uses_does_not_resolve_is_refused_at_its_line(
    routine_stack: RoutineStack, uses: str, problem: str
) -> None:
    org = routine_stack.runner()
    answer = await routine_stack.store(
        org, HELLO.replace(f"uses: {FREE_ECHO}\n    foreach", f"uses: {uses}\n    foreach")
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", "yaml")
    assert error["problems"] == [f"routine.yaml:10:11: step 'again': uses: cannot resolve {uses}: {problem}"]
    assert _get(routine_stack, "/v1/routines/hello", org.headers).status_code == 404  # nothing stored


async def test_literal_inputs_that_do_not_fit_the_action_are_refused_at_their_line(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    bad = HELLO.replace('with: {text: "hello ${{ inputs.who }}"}', "with: {text: 5, loud: true}")
    error = (await routine_stack.store(org, bad)).json()["error"]
    assert error["problems"] == [
        "routine.yaml:8:18: step 'greet': with.text: 5 is not of type 'string'",
        f"routine.yaml:8:21: step 'greet': with: {FREE_ECHO} has no input 'loud' (inputs: text, file)",
    ]


async def test_a_routine_with_problems_is_refused_with_their_lines(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    bad = HELLO.replace("steps.greet.output.text }} #", "steps.nope.output.text }} #")
    answer = await routine_stack.store(org, bad)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == "yaml"
    assert any(line.startswith("routine.yaml:12:23:") and "nope" in line for line in error["problems"]), error


async def test_inputs_that_do_not_fit_are_refused_naming_the_input(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    await routine_stack.store(org, HELLO)
    answer = _post(routine_stack, "/v1/routines/hello/runs", org.headers, {"inputs": {"times": "x"}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["field"] == "inputs"
    assert "input 'who' is required" in error["problems"]
    assert any(
        p.startswith("input 'times'") and "'x' is not of type 'integer'" in p for p in error["problems"]
    )


async def test_inputs_whose_check_would_take_long_are_refused_quickly_with_a_sentence(
    routine_stack: RoutineStack,
) -> None:
    """A pattern RE2 matches slowly over a long text, and `uniqueItems` over many mixed items, at a run's
    start and a schedule's creation: refused (or checked) in bounded work, naming the input."""
    org = routine_stack.runner()
    source = f"""\
name: heavy-inputs
inputs:
  text: {{type: string, pattern: "(a|b){{1,1000}}c", default: abc}}
  items: {{type: array, uniqueItems: true, default: []}}
steps:
  - id: say
    uses: {FREE_ECHO}
    with: {{text: "${{{{ inputs.text }}}}"}}
"""
    assert (await routine_stack.store(org, source)).status_code == 201
    long_text = {"inputs": {"text": "ab" * 50_000}}  # 4 s of RE2 work, were it matched
    mixed = [i if i % 2 else str(i) for i in range(15_000)]  # jsonschema's own compares every pair
    for path in ("/v1/routines/heavy-inputs/runs", "/v1/routines/heavy-inputs/schedules"):
        body = {**long_text, "cron": "0 7 * * *"} if path.endswith("schedules") else long_text
        answer = _post(routine_stack, path, org.headers, body)
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]["message"]
        assert "input 'text': a text of 100,000 characters is too long to check against" in message
        answer = _post(routine_stack, path, org.headers, {**body, "inputs": {"items": [*mixed, 14_999]}})
        assert answer.status_code == 400, answer.text
        assert "input 'items': " in answer.json()["error"]["message"]
        assert "has non-unique elements" in answer.json()["error"]["message"]
    run = await routine_stack.run(org, source, {"items": mixed})
    assert run["status"] == "succeeded", run


async def test_the_same_idempotency_key_gives_the_same_run(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    await routine_stack.store(org, HELLO)
    headers = {**org.headers, "Idempotency-Key": "deploy-42"}
    first = _post(routine_stack, "/v1/routines/hello/runs", headers, {"inputs": {"who": "a"}})
    again = _post(routine_stack, "/v1/routines/hello/runs", headers, {"inputs": {"who": "a"}})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    other = _post(routine_stack, "/v1/routines/hello/runs", headers, {"inputs": {"who": "b"}})
    assert other.status_code == 422  # the rule of POST /v1/actions/call, word for word
    error = other.json()["error"]
    assert error["code"] == "idempotency_key_reused" and error["field"] == "Idempotency-Key"
    assert error["message"].startswith("Idempotency-Key 'deploy-42' was already used for a different request")
    spelled = loopback.post(  # the same request spelled otherwise is the same request (RFC 8785)
        f"{routine_stack.url}/v1/routines/hello/runs",
        headers={**headers, "Content-Type": "application/json"},
        content='{ "inputs" : { "who" : "a" } }',
        timeout=30,
    )
    assert spelled.status_code == 200 and spelled.json()["run_id"] == first.json()["run_id"]
    bad = _post(routine_stack, "/v1/routines/hello/runs", {**org.headers, "Idempotency-Key": ""}, {})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "Idempotency-Key"
    assert len(_get(routine_stack, "/v1/runs", org.headers).json()["runs"]) == 1
    await routine_stack.final(org, first.json()["run_id"])


async def test_a_start_says_where_its_time_went_in_server_timing(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    await routine_stack.store(org, HELLO)
    headers = {**org.headers, "Idempotency-Key": "timed-1"}
    started = _post(routine_stack, "/v1/routines/hello/runs", headers, {"inputs": {"who": "a"}})
    again = _post(routine_stack, "/v1/routines/hello/runs", headers, {"inputs": {"who": "a"}})

    def parts(answer: httpx.Response) -> dict[str, float]:
        named = [part.split(";dur=") for part in answer.headers["Server-Timing"].split(", ")]
        return {name: float(ms) for name, ms in named}

    assert started.status_code == 201, started.text
    timed = parts(started)
    assert list(timed) == ["grant", "ready", "count", "lane", "temporal", "insert"]
    assert all(ms >= 0 for ms in timed.values()) and timed["grant"] <= timed["ready"]
    assert list(parts(again)) == ["ready"]  # the key's run, read: Temporal not asked
    await routine_stack.final(org, started.json()["run_id"])


async def test_a_failed_step_fails_the_run_with_its_code_reason_and_sentence(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    failing = HELLO.replace(
        f'uses: {FREE_ECHO}\n    with: {{text: "hello ${{{{ inputs.who }}}}"}}',
        f"uses: {FREE_FAIL}\n    with: {{mode: exit, exitCode: 3}}",
    )
    stored = await routine_stack.store(org, failing)
    assert stored.status_code == 201, stored.text
    run = await routine_stack.final(org, await routine_stack.start_run(org, "hello", {"who": "a"}))
    assert run["status"] == "failed"
    assert (run["error"]["step"], run["error"]["code"], run["error"]["reason"]) == (
        "greet",
        "tool_failed",
        "exit",
    )
    assert run["steps"]["greet"]["error"]["message"] == run["error"]["message"]
    assert run["steps"]["greet"]["status"] == "failed" and run["steps"]["greet"]["attempts"] == 1
    assert run["steps"]["greet"]["error"]["exit_code"] == 3
    assert run["steps"]["again"]["status"] == "skipped"  # after a failure, as in GitHub Actions


async def test_a_run_ended_in_temporal_is_failed_with_the_sentence_it_was_ended_with(
    routine_stack: RoutineStack,
) -> None:
    """A run an operator ends in Temporal (`temporal workflow terminate --reason ...`) reads as failed, with
    the reason as its error's message."""
    org = routine_stack.runner()
    sleeping = HELLO.replace(
        f'uses: {FREE_ECHO}\n    with: {{text: "hello ${{{{ inputs.who }}}}"}}',
        f"uses: {FREE_FAIL}\n    with: {{mode: sleep, seconds: 30}}",
    )
    stored = await routine_stack.store(org, sleeping)
    assert stored.status_code == 201, stored.text
    run_id = await routine_stack.start_run(org, "hello", {"who": "a"})
    workflow_id = (await routine_stack.read(org, run_id))["workflow_id"]
    reason = "ended by the operator: its upstream is down for the day"
    await routine_stack.temporal_client.get_workflow_handle(workflow_id).terminate(reason=reason)
    run = await routine_stack.final(org, run_id)
    assert run["status"] == "failed"
    assert run["error"] == {"step": None, "code": "terminated", "reason": None, "message": reason}
    # the step's activity learns its run is gone (its heartbeat), cancels its call and ends quietly
    deadline = time.monotonic() + PATIENCE_S
    while not (calls := routine_stack.calls_of(org)) or any(c.state == "running" for c in calls):
        assert time.monotonic() < deadline, calls
        await asyncio.sleep(0.1)
    assert routine_stack.worker is not None
    no_traceback([routine_stack.worker])


async def test_scopes_and_organizations_fence_routines_and_runs(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    await routine_stack.store(org, HELLO)
    run_id = await routine_stack.start_run(org, "hello", {"who": "a"})
    reader = routine_stack.add_key(org, scopes=["routines:read"])
    refused = _post(routine_stack, "/v1/routines/hello/runs", reader.headers, {"inputs": {"who": "a"}})
    assert refused.status_code == 403 and refused.json()["error"]["missing_scope"] == "routines:run"
    assert _get(routine_stack, f"/v1/runs/{run_id}", reader.headers).status_code == 200
    caller = routine_stack.add_key(org, scopes=["routines:run", "routines:read"])
    refused = _post(routine_stack, "/v1/routines/hello/runs", caller.headers, {"inputs": {"who": "a"}})
    assert refused.status_code == 403 and refused.json()["error"]["missing_scope"] == "actions:call"
    other = routine_stack.org(scopes=RUNNER_SCOPES)
    assert _get(routine_stack, f"/v1/runs/{run_id}", other.headers).status_code == 404
    missing = _post(routine_stack, "/v1/routines/hello/runs", other.headers, {})
    assert missing.status_code == 404 and "no routine named 'hello'" in missing.json()["error"]["message"]
    await routine_stack.final(org, run_id)


def test_uses_resolve_in_the_registry_of_the_apis_own_database(
    client: TestClient, make_org: Callable[..., apitest.Org], tmp_path: Path
) -> None:
    """On SQLite and PostgreSQL: `@1` is the newest 1.x.y, exact refs must exist (semver order)."""
    key = Ed25519PrivateKey.generate()
    publisher = make_org(namespaces=[apitest.NAMESPACE])
    apitest.register_key(client, publisher, key)
    api = B3OS(str(client.base_url), publisher.key, http_client=client)
    for version in ("1.10.0", "1.2.0"):
        fewer = version == "1.10.0"  # the newest 1.x.y has no `fail` action

        def edit(manifest: dict[str, Any], fewer: bool = fewer) -> None:
            if fewer:
                manifest["actions"] = [a for a in manifest["actions"] if a["key"] != "fail"]

        publish_dir(
            api, apitest.build_echo(tmp_path, key, version=version, edit=edit).root, say=lambda _: None
        )
    org = make_org(scopes=list(RUNNER_SCOPES))
    routine = "name: one\nsteps:\n  - id: a\n    uses: {uses}\n    with: {{{with_}}}\n"
    echo = f"{apitest.NAMESPACE}/echo"

    def store(uses: str, with_: str = "text: hi") -> httpx.Response:
        yaml = routine.format(uses=uses, with_=with_)
        return client.post("/v1/routines", json={"yaml": yaml}, headers=org.headers)

    assert store(f"{echo}/echo@1").status_code == 201
    assert store(f"{echo}/fail@1.2.0", "mode: exit").status_code == 201
    problems = {
        f"{echo}/fail@1": f"{echo}@1.10.0 has no action 'fail' (actions: noop, echo)",
        f"{echo}/echo@1.3.0": f"{echo} has no version 1.3.0 (versions: 1.2.0, 1.10.0)",
    }
    for uses, problem in problems.items():
        answer = store(uses)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["problems"] == [
            f"routine.yaml:4:11: step 'a': uses: cannot resolve {uses}: {problem}"
        ]
    listed = client.get("/v1/routines", headers=org.headers).json()["routines"]
    assert [(r["name"], r["version"], r["steps"]) for r in listed] == [("one", 2, ["a"])]


async def test_a_read_that_waits_answers_when_the_run_ends_or_when_its_wait_is_over(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, _sleeping("nap", 4))).status_code == 201
    run_id = await routine_stack.start_run(org, "nap")

    # its step takes 4 s: a read that may wait 0.3 s gives the running run once those have passed
    began = time.monotonic()
    running = _get(routine_stack, f"/v1/runs/{run_id}", org.headers, wait_s=0.3)
    assert running.status_code == 200 and running.json()["status"] == "running"
    assert time.monotonic() - began >= 0.3
    # one read that may wait longer than the run gives the ended run, its step's output included
    ended = _get(routine_stack, f"/v1/runs/{run_id}", org.headers, wait_s=30)
    assert ended.json()["status"] == "succeeded" and ended.json()["steps"]["s"]["status"] == "succeeded"
    assert time.monotonic() - began < 30
    # an ended run is answered at once, whatever the wait
    assert _get(routine_stack, f"/v1/runs/{run_id}", org.headers, wait_s=60).json() == ended.json()

    for bad in (-1, 61, "nan", "soon"):
        refused = _get(routine_stack, f"/v1/runs/{run_id}", org.headers, wait_s=bad)
        assert refused.status_code == 400, (bad, refused.text)
        assert "wait_s" in refused.text


async def test_runs_past_the_organizations_limit_at_once_are_refused_with_retry_after(
    routine_stack: RoutineStack,
) -> None:
    url, proc = routine_stack.start_api(extra_env={"B3OS_RUNS_PER_ORG": "1"}, listed=False)
    try:
        org, other = routine_stack.runner(), routine_stack.runner()
        fast = f"name: fast\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
        for who in (org, other):
            assert (await routine_stack.store(who, SLOW, url=url)).status_code == 201
            assert (await routine_stack.store(who, fast, url=url)).status_code == 201
        first = await routine_stack.start_run(org, "slow", url=url)
        refused = loopback.post(f"{url}/v1/routines/fast/runs", headers=org.headers, json={}, timeout=30)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "5"
        error = refused.json()["error"]
        assert error["code"] == "concurrency_limited" and error["limit"] == 1
        assert "already has 1 runs running" in error["message"]
        theirs = await routine_stack.start_run(other, "fast", url=url)  # another organization is not held up
        assert (await routine_stack.final(other, theirs, url=url))["status"] == "succeeded"
        await routine_stack.final(org, first, url=url)
        again = await routine_stack.start_run(org, "fast", url=url)  # the first one ended: room again
        assert (await routine_stack.final(org, again, url=url))["status"] == "succeeded"
    finally:
        proc.stop()


async def test_run_starts_are_limited_per_organization_and_minute(routine_stack: RoutineStack) -> None:
    url, proc = routine_stack.start_api(extra_env={"B3OS_RUN_STARTS_PER_MINUTE": "2"}, listed=False)
    try:
        org = routine_stack.runner()
        fast = f"name: fast\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
        assert (await routine_stack.store(org, fast, url=url)).status_code == 201
        first = await routine_stack.start_run(org, "fast", url=url)
        await routine_stack.start_run(org, "fast", url=url)
        refused = loopback.post(f"{url}/v1/routines/fast/runs", headers=org.headers, json={}, timeout=30)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and error["limit"] == 2
        assert "started 2 runs in the last 60 seconds" in error["message"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 61
        assert (await routine_stack.final(org, first, url=url))["status"] == "succeeded"
    finally:
        proc.stop()


async def test_a_run_goes_first_when_its_organization_has_few_runs_in_flight(
    routine_stack: RoutineStack,
) -> None:
    from api.runs.limits import run_priority

    org = routine_stack.runner()
    fast = f"name: fast\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
    assert (await routine_stack.store(org, fast)).status_code == 201
    run = await routine_stack.final(org, await routine_stack.start_run(org, "fast"))
    handle = routine_stack.temporal_client.get_workflow_handle(run["workflow_id"])
    info = (await handle.describe()).raw_description.workflow_execution_info
    assert info.priority.priority_key == 1  # none of its organization's runs was running
    assert [run_priority(n) for n in (0, 1, 2, 3, 4, 7, 8, 20)] == [1, 2, 3, 3, 4, 4, 5, 5]


async def test_an_api_process_starts_one_run_of_an_organization_at_a_time_and_others_do_not_wait(
    tmp_path: Path,
) -> None:
    import asyncio

    from sqlmodel import create_engine

    from api.runs.limits import RunLimits

    url = f"sqlite:///{tmp_path / 'unused.db'}"
    runs = RunLimits(create_engine(url), starts_per_minute=120, runs_per_org=4)
    order: list[str] = []
    release = asyncio.Event()

    async def start(org: str, name: str) -> None:
        async with runs.turn(org):
            order.append(f"{name} in")
            if name == "a1":
                await release.wait()
            order.append(f"{name} out")

    first = asyncio.create_task(start("org_a", "a1"))
    await asyncio.sleep(0)
    second = asyncio.create_task(start("org_a", "a2"))
    other = asyncio.create_task(start("org_b", "b1"))
    await other  # another organization's start does not wait for org_a's
    assert order == ["a1 in", "b1 in", "b1 out"]
    release.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["a1 out", "a2 in", "a2 out"]  # org_a's second start waited for its first
    assert runs._turns == {}  # nothing is kept for organizations with no start in flight


async def test_a_count_of_running_runs_is_reused_for_a_moment_unless_it_would_refuse(
    tmp_path: Path, temporal_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlmodel import create_engine

    from api.runs import limits
    from api.runs.limits import RunLimits

    url = f"sqlite:///{tmp_path / 'unused.db'}"
    runs = RunLimits(create_engine(url), starts_per_minute=120, runs_per_org=2)
    asked: list[str] = []
    real = temporal_env.client

    class Counting:  # the real client, its visibility queries counted
        async def count_workflows(self, query: str) -> Any:
            asked.append(query)
            return await real.count_workflows(query)

    client: Any = Counting()
    assert await runs.check_running(client, "org_c") == 0 and len(asked) == 1
    runs._running["org_c"].since += 1  # as a run this process started does
    assert await runs.check_running(client, "org_c") == 1 and len(asked) == 1  # the count reused
    runs._running["org_c"].since += 1
    # 0 + 2 would refuse: counted again, and Temporal runs none of org_c's runs
    assert await runs.check_running(client, "org_c") == 0 and len(asked) == 2
    assert "B3osOrg = 'org_c'" in asked[-1]
    monkeypatch.setattr(limits, "RUNNING_COUNT_FRESH_S", 0.0)
    await runs.check_running(client, "org_c")
    assert len(asked) == 3  # a stale count is taken again


async def test_a_count_that_refused_refuses_for_a_second_without_asking_temporal_ticks_come_back_spread(
    tmp_path: Path,
) -> None:
    """While an organization runs its most, its next starts (a schedule's ticks, retries) are refused on
    the count that refused, for REFUSING_COUNT_KEPT_S, before any grant is written; a tick is told to come
    back up to TICK_RETRY_SPREAD_S later than anyone else, at random."""
    from sqlmodel import create_engine

    from api.calls.errors import ConcurrencyLimited
    from api.runs import limits
    from api.runs.limits import RunLimits

    runs = RunLimits(
        create_engine(f"sqlite:///{tmp_path / 'unused.db'}"), starts_per_minute=120, runs_per_org=2
    )
    asked: list[str] = []

    class Full:  # Temporal's visibility says org_f runs 2
        async def count_workflows(self, query: str) -> Any:
            asked.append(query)
            return types.SimpleNamespace(count=2)

    client: Any = Full()
    runs.check_known_running("org_f")  # nothing counted yet: not refused here
    with pytest.raises(
        ConcurrencyLimited, match=r"already has 2 runs running, the most it may at once \(2\)"
    ):
        await runs.check_running(client, "org_f")
    waits = []
    for _ in range(40):
        with pytest.raises(ConcurrencyLimited) as refused:
            runs.check_known_running("org_f", spread_s=limits.TICK_RETRY_SPREAD_S)
        waits.append(refused.value.retry_after)
        with pytest.raises(ConcurrencyLimited):
            await runs.check_running(client, "org_f")
    assert len(asked) == 1  # the count that refused, reused
    assert all(5 <= w <= 35 for w in waits) and len(set(waits)) > 5, waits  # whole seconds, spread
    runs._running["org_f"].at = time.monotonic() - limits.REFUSING_COUNT_KEPT_S - 0.1
    runs.check_known_running("org_f")  # a second later: counted again at the next start
    with pytest.raises(ConcurrencyLimited) as refused:
        await runs.check_running(client, "org_f")
    assert len(asked) == 2 and refused.value.retry_after == 5  # not a tick: Retry-After as ever


async def test_a_start_while_temporal_is_unreachable_is_503_and_leaves_no_grant_a_keyed_repeat_is_answered(
    routine_stack: RoutineStack,
) -> None:
    from calls.stack import free_port
    from sqlmodel import Session, col, select

    from api.runs.tables import RunGrant, RunRecord

    org = routine_stack.runner()
    source = f"name: away\nsteps:\n  - id: e\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
    assert (await routine_stack.store(org, source)).status_code == 201
    keyed = {**org.headers, "Idempotency-Key": "away-1"}
    async with loopback.async_client(base_url=routine_stack.url, timeout=30) as http:
        first = await http.post("/v1/routines/away/runs", json={"inputs": {}}, headers=keyed)
    assert first.status_code == 201, first.text
    ended = await routine_stack.final(org, first.json()["run_id"])  # its outcome kept in its row
    # an api whose Temporal does not answer (a port nobody listens on)
    url, proc = routine_stack.start_api(
        extra_env={"B3OS_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}, listed=False
    )
    try:
        async with loopback.async_client(base_url=url, timeout=60) as http:
            refused = await http.post("/v1/routines/away/runs", json={"inputs": {}}, headers=org.headers)
            repeat = await http.post("/v1/routines/away/runs", json={"inputs": {}}, headers=keyed)
    finally:
        proc.stop()
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "unavailable" and refused.headers["Retry-After"]
    assert repeat.status_code == 200, repeat.text  # its ended run, from its row: Temporal not asked
    assert (repeat.json()["run_id"], repeat.json()["status"]) == (ended["run_id"], "succeeded")
    with Session(routine_stack.engine) as session:
        runs = session.exec(select(RunRecord.id).where(col(RunRecord.org_id) == org.org_id)).all()
        grants = session.exec(select(RunGrant.run_id).where(col(RunGrant.org_id) == org.org_id)).all()
    assert runs == [first.json()["run_id"]] and grants == runs  # the refused start left nothing behind


def test_a_tick_past_its_organizations_starts_a_minute_comes_back_spread(migrated_database_url: str) -> None:
    from sqlmodel import Session

    from api.db import make_engine
    from api.errors import RateLimited
    from api.runs import limits
    from api.runs.limits import RunLimits
    from api.runs.tables import RunRecord

    engine = make_engine(migrated_database_url)
    with Session(engine) as session:
        session.add(
            RunRecord(
                id="run_s",
                org_id="org_s",
                key_id="k",
                routine_name="r",
                routine_version=1,
                workflow_id="routine-r-run_s",
                request_hash="h",
                inputs={},
            )
        )
        session.commit()
    runs = RunLimits(engine, starts_per_minute=1, runs_per_org=2)
    with pytest.raises(RateLimited) as refused:
        runs.check_starts("org_s")
    assert refused.value.retry_after == 60  # when the minute's one start leaves it
    waits = []
    for _ in range(40):
        with pytest.raises(RateLimited) as refused:
            runs.check_starts("org_s", spread_s=limits.TICK_RETRY_SPREAD_S)
        waits.append(refused.value.retry_after)
    assert all(59 <= w <= 90 for w in waits) and len(set(waits)) > 5, waits
    engine.dispose()


def test_a_runs_row_is_written_once_and_binds_its_grant_to_the_first_execution(
    migrated_database_url: str,
) -> None:
    """A start's grant and row are written on the driver (SQLite) or in a session (PostgreSQL): the row
    written again under the same run id (a repeated start that lost the race) gives back the first, the
    grant stays bound to the first execution, and a row that clashes otherwise is refused."""
    from datetime import timedelta

    from sqlalchemy.exc import IntegrityError
    from sqlmodel import Session

    from api import rawsql
    from api.db import make_engine
    from api.runs import grants
    from api.runs.launch import Launches
    from api.runs.tables import RunGrant, RunRecord

    engine = make_engine(migrated_database_url)

    def row(run_id: str, key: str | None = "k1") -> RunRecord:
        return RunRecord(
            id=run_id,
            org_id="org_w",
            key_id="key_w",
            routine_name="r",
            routine_version=1,
            workflow_id=f"routine-r-{run_id}",
            idempotency_key=key,
            request_hash="h",
            inputs={"n": 1, "deep": {"list": [1, "two"]}},
            pins={"a/b/c@1": "a/b/c@1.0.0"},
        )

    launches = Launches(engine, Any, Any, Any, lasts=timedelta(hours=1))  # type: ignore[arg-type]
    with rawsql.transaction(engine) as tx:
        secret = grants.mint(
            tx,
            run_id="run_w",
            org_id="org_w",
            key_id="key_w",
            workflow_id="routine-r-run_w",
            lasts=timedelta(hours=1),
            steps={"a": grants.GrantStep(ref="a/b/c@1.0.0", foreach=True)},
            cleanup_steps=["a"],
        )
        tx.commit()
    first, created = launches.insert_run(row("run_w"), "exec-1")
    assert created and first.id == "run_w"
    again, created = launches.insert_run(row("run_w"), "exec-2")
    assert not created and again.inputs == {"n": 1, "deep": {"list": [1, "two"]}}
    assert again.pins == {"a/b/c@1": "a/b/c@1.0.0"} and again.created_at == first.created_at
    with Session(engine) as session:
        grant = session.get(RunGrant, grants.hash_secret(secret))
        assert grant is not None and grant.execution_id == "exec-1"  # the first execution's, kept
        assert grant.steps == {"a": {"ref": "a/b/c@1.0.0", "foreach": True}} and grant.cleanup_steps == ["a"]
        assert grant.expires_at > grant.created_at + timedelta(minutes=59)
    with pytest.raises(IntegrityError):  # another run id under the same Idempotency-Key
        launches.insert_run(row("run_other"), "exec-3")
    launches.forget_grant(secret)
    with Session(engine) as session:
        assert session.get(RunGrant, grants.hash_secret(secret)) is None
        assert session.get(RunRecord, "run_other") is None
    engine.dispose()
