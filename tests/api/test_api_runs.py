"""The routines and runs API on a real Temporal dev server with a real routine worker.

The worker's calls go to the STAND-IN api of tests/activities/stand_in_api.py (so these tests do not
need a node); the end-to-end test through the real POST /v1/actions/call and a node lives with the
workflow tests.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from apitest import Org
from fastapi import FastAPI
from pydantic import SecretStr
from temporalio.testing import WorkflowEnvironment

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from api.config import Settings
from engine.worker import build_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "activities"))  # the stand-in's module
from stand_in_api import Answer, StandInApi, problem  # noqa: E402

ECHO = "com.example.tools/echo/echo@1"
SLOW = "com.example.tools/slow/run@1"
HELLO = """\
name: hello
inputs:
  who: {type: string}
  times: {type: integer, default: 2}
steps:
  - id: greet
    uses: com.example.tools/echo/echo@1
    with: {text: "hello ${{ inputs.who }}"}
  - id: again
    uses: com.example.tools/echo/echo@1
    foreach: "${{ [1, 2] }}"
    with: {text: "${{ steps.greet.output.text }} #${{ item }}"}
outputs:
  greeting: ${{ steps.greet.output.text }}
  count: ${{ size(steps.again.output) }}
"""


@pytest.fixture
def queue() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def settings(database_url: str, tmp_path: Path, temporal_env: WorkflowEnvironment, queue: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "state",
        database_url=database_url,
        temporal_address=temporal_env.client.service_client.config.target_host,
        temporal_namespace=temporal_env.client.namespace,
        temporal_task_queue=queue,
    )


@pytest.fixture
def stand_in() -> Iterator[StandInApi]:
    api = StandInApi().start()
    yield api
    api.stop()


@pytest.fixture
async def worker(temporal_env: WorkflowEnvironment, stand_in: StandInApi, queue: str) -> AsyncIterator[None]:
    acts = ActionActivities(ActivitySettings(api_url=stand_in.url, worker_token=SecretStr("wkr")))
    async with build_worker(temporal_env.client, queue, acts):
        yield
    await acts.aclose()


@pytest.fixture
async def http(app: FastAPI, worker: None) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


@pytest.fixture
def org(make_org: Callable[..., Org]) -> Org:
    return make_org(scopes=["routines:run", "routines:read", "actions:call"])


async def _store(http: httpx.AsyncClient, org: Org, text: str = HELLO) -> httpx.Response:
    return await http.post("/v1/routines", json={"yaml": text}, headers=org.headers)


async def _wait_final(http: httpx.AsyncClient, org: Org, run_id: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}", headers=org.headers)).json()
        if body["status"] != "running":
            return body
        assert time.monotonic() < deadline, f"run {run_id} still running: {body}"
        await asyncio.sleep(0.1)


async def test_a_stored_routine_runs_and_its_run_reads_back(
    http: httpx.AsyncClient, org: Org, stand_in: StandInApi, temporal_env: WorkflowEnvironment
) -> None:
    stored = await _store(http, org)
    assert stored.status_code == 201, stored.text
    assert stored.json()["name"] == "hello" and stored.json()["steps"] == ["greet", "again"]

    started = await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "ann"}}, headers=org.headers)
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    run = await _wait_final(http, org, run_id)

    assert run["status"] == "succeeded"
    assert run["inputs"] == {"who": "ann", "times": 2}  # the default filled in
    assert run["outputs"] == {"greeting": "hello ann", "count": 2}
    assert run["steps"]["greet"] == {
        "status": "succeeded",
        "attempts": 1,
        "output": {"text": "hello ann"},
        "error": None,
    }
    assert run["steps"]["again"]["output"] == [{"text": "hello ann #1"}, {"text": "hello ann #2"}]
    assert {r.headers["x-b3os-on-behalf-of"] for r in stand_in.requests} == {org.key_id}
    listed = (await http.get("/v1/runs", headers=org.headers)).json()["runs"]
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "succeeded")]
    # Temporal UI operators find the run by routine and organization
    desc = await temporal_env.client.get_workflow_handle(run["workflow_id"]).describe()
    attrs = {key.name: value for key, value in desc.typed_search_attributes}
    assert (attrs["B3osRoutine"], attrs["B3osOrg"]) == ("hello", org.org_id)
    assert run["workflow_id"] == f"routine-hello-{run_id}"


async def test_a_routine_with_problems_is_refused_with_their_lines(http: httpx.AsyncClient, org: Org) -> None:
    bad = HELLO.replace("steps.greet.output.text }} #", "steps.nope.output.text }} #")
    answer = await _store(http, org, bad)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == "yaml"
    assert any(line.startswith("routine.yaml:12:23:") and "nope" in line for line in error["problems"]), error


async def test_inputs_that_do_not_fit_are_refused_naming_the_input(http: httpx.AsyncClient, org: Org) -> None:
    await _store(http, org)
    answer = await http.post("/v1/routines/hello/runs", json={"inputs": {"times": "x"}}, headers=org.headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["field"] == "inputs"
    assert "input 'who' is required" in error["problems"]
    assert any(
        p.startswith("input 'times'") and "'x' is not of type 'integer'" in p for p in error["problems"]
    )


async def test_the_same_idempotency_key_gives_the_same_run(http: httpx.AsyncClient, org: Org) -> None:
    await _store(http, org)
    headers = {**org.headers, "Idempotency-Key": "deploy-42"}
    first = await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=headers)
    again = await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"]
    other = await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "b"}}, headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "conflict" and "deploy-42" in other.json()["error"]["message"]
    assert len((await http.get("/v1/runs", headers=org.headers)).json()["runs"]) == 1


async def test_a_failed_step_fails_the_run_with_its_code_reason_and_sentence(
    http: httpx.AsyncClient, org: Org, stand_in: StandInApi
) -> None:
    stand_in.script(ECHO, [problem(502, "tool_failed", "exit", "the command exited with 3", exit_code=3)])
    await _store(http, org)
    run_id = (
        await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=org.headers)
    ).json()["run_id"]
    run = await _wait_final(http, org, run_id)
    assert run["status"] == "failed"
    assert run["error"] == {
        "step": "greet",
        "code": "tool_failed",
        "reason": "exit",
        "message": "the command exited with 3",
    }
    assert run["steps"]["greet"]["status"] == "failed" and run["steps"]["greet"]["attempts"] == 1
    assert run["steps"]["greet"]["error"]["exit_code"] == 3
    assert run["steps"]["again"]["status"] == "pending"


async def test_a_run_is_read_mid_way_and_cancelled(
    http: httpx.AsyncClient, org: Org, stand_in: StandInApi
) -> None:
    release = threading.Event()
    stand_in.script(SLOW, [Answer(hold=release)])
    await _store(http, org, HELLO.replace(f"uses: {ECHO}\n    foreach", f"uses: {SLOW}\n    foreach"))
    try:
        run_id = (
            await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=org.headers)
        ).json()["run_id"]
        deadline = time.monotonic() + 10
        while len(stand_in.requests) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        mid = (await http.get(f"/v1/runs/{run_id}", headers=org.headers)).json()
        assert mid["status"] == "running"
        assert (mid["steps"]["greet"]["status"], mid["steps"]["again"]["status"]) == ("succeeded", "running")

        cancel = await http.post(f"/v1/runs/{run_id}/cancel", headers=org.headers)
        assert cancel.status_code == 202 and cancel.json() == {"run_id": run_id, "status": "cancelling"}
        run = await _wait_final(http, org, run_id)
        assert run["status"] == "cancelled" and run["steps"]["again"]["status"] == "cancelled"
        again = await http.post(f"/v1/runs/{run_id}/cancel", headers=org.headers)
        assert again.status_code == 409 and "already ended (cancelled)" in again.json()["error"]["message"]
    finally:
        release.set()


async def test_scopes_and_organizations_fence_routines_and_runs(
    http: httpx.AsyncClient, org: Org, make_org: Callable[..., Org], add_key: Callable[..., Org]
) -> None:
    await _store(http, org)
    run_id = (
        await http.post("/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=org.headers)
    ).json()["run_id"]
    reader = add_key(org, ["routines:read"])
    refused = await http.post(
        "/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=reader.headers
    )
    assert refused.status_code == 403 and refused.json()["error"]["missing_scope"] == "routines:run"
    assert (await http.get(f"/v1/runs/{run_id}", headers=reader.headers)).status_code == 200
    caller = add_key(org, ["routines:run", "routines:read"])
    refused = await http.post(
        "/v1/routines/hello/runs", json={"inputs": {"who": "a"}}, headers=caller.headers
    )
    assert refused.status_code == 403 and refused.json()["error"]["missing_scope"] == "actions:call"
    other = make_org(scopes=["routines:run", "routines:read", "actions:call"])
    assert (await http.get(f"/v1/runs/{run_id}", headers=other.headers)).status_code == 404
    missing = await http.post("/v1/routines/hello/runs", json={}, headers=other.headers)
    assert missing.status_code == 404 and "no routine named 'hello'" in missing.json()["error"]["message"]
