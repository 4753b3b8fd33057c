"""End to end, nothing stood in: the runs API starts a Temporal run, the routine worker calls the REAL
POST /v1/actions/call of a real api process, which sends each call to a real node running the echo
tool in a fresh VM. The stack (api processes, node, published echo packs) is the calls tests' one.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from calls.stack import WORKER_TOKEN, Stack, start_stack
from pydantic import SecretStr
from sqlmodel import Session, col, select
from temporalio.testing import WorkflowEnvironment

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from activities.idempotency import step_idempotency_key
from api.calls.tables import IdempotencyRecord, ToolCall
from api.config import Settings
from api.main import create_app

REPO = Path(__file__).resolve().parents[2]
SCOPES = ("routines:run", "routines:read", "actions:call")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    s = start_stack(Path(tempfile.mkdtemp(prefix="b3os-e2e-")))
    yield s
    s.stop()


@pytest.fixture
async def runs_api(stack: Stack, temporal_env: WorkflowEnvironment) -> AsyncIterator[httpx.AsyncClient]:
    """The runs API on the stack's database, with a routine worker calling the stack's api."""
    from engine.worker import build_worker

    queue = f"test-{uuid.uuid4()}"
    app = create_app(
        Settings(
            data_dir=stack.root / "state",
            database_url=stack.db_url,
            temporal_address=temporal_env.client.service_client.config.target_host,
            temporal_task_queue=queue,
        )
    )
    acts = ActionActivities(ActivitySettings(api_url=stack.url, worker_token=SecretStr(WORKER_TOKEN)))
    async with build_worker(temporal_env.client, queue, acts):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
            yield http
    await acts.aclose()
    app.state.engine.dispose()


async def _final(http: httpx.AsyncClient, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}", headers=headers)).json()
        if run["status"] != "running":
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.1)


async def test_the_hello_example_runs_through_the_real_api_and_node(
    runs_api: httpx.AsyncClient, stack: Stack
) -> None:
    org = stack.org(scopes=SCOPES)
    source = (REPO / "examples" / "routines" / "hello.yaml").read_text()
    stored = await runs_api.post("/v1/routines", json={"yaml": source}, headers=org.headers)
    assert stored.status_code == 201, stored.text
    started = await runs_api.post(
        "/v1/routines/hello/runs", json={"inputs": {"name": "ann"}}, headers=org.headers
    )
    assert started.status_code == 201, started.text
    run = await _final(runs_api, org.headers, started.json()["run_id"])

    assert run["status"] == "succeeded", run
    assert run["outputs"]["greeting"] == "hello ann, again (3 friends next)"
    assert run["outputs"]["friends"] == ["1. hello ada", "2. hello grace", "3. hello linus"]
    assert run["outputs"]["file"]["name"] == "again-hello.txt"
    assert run["outputs"]["file"]["$bytes"] == "aGVsbG8K"
    assert all(step["attempts"] == 1 for step in run["steps"].values())
    # every step's call ran once, through the routine surface, under the run's key, with its derived key
    with Session(stack.engine) as session:
        calls = session.exec(select(ToolCall).where(col(ToolCall.org_id) == org.org_id)).all()
        keys = session.exec(
            select(IdempotencyRecord.key).where(col(IdempotencyRecord.org_id) == org.org_id)
        ).all()
    assert len(calls) == 7
    assert {c.surface for c in calls} == {"routine"} and {c.key_id for c in calls} == {org.key_id}
    workflow_id = run["workflow_id"]
    assert set(keys) == {
        *(step_idempotency_key(workflow_id, s, None) for s in ("greet", "again", "last", "done")),
        *(step_idempotency_key(workflow_id, "friends", i) for i in range(3)),
    }


async def test_a_step_the_action_refuses_fails_the_run_with_the_apis_sentence(
    runs_api: httpx.AsyncClient, stack: Stack
) -> None:
    org = stack.org(scopes=SCOPES)
    source = """\
name: refused
steps:
  - id: echo
    uses: com.example.tools/echo/echo@1
    with: {text: "${{ 'x'.size() > 0 ? 5 : 6 }}"}
"""
    await runs_api.post("/v1/routines", json={"yaml": source}, headers=org.headers)
    started = await runs_api.post("/v1/routines/refused/runs", json={}, headers=org.headers)
    run = await _final(runs_api, org.headers, started.json()["run_id"])
    assert run["status"] == "failed"
    error = run["error"]
    assert error["step"] == "echo" and error["code"] == "invalid_request"
    assert error["message"] == "input.text: 5 is not of type 'string'"
    assert run["steps"]["echo"]["attempts"] == 1
