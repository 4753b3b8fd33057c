"""End to end, nothing stood in: the runs API of a real api process starts a Temporal run, a routine
worker process calls the real POST /v1/actions/call, which sends each call to a real node running the
echo tool in a fresh VM (the session's stack of tests/realstack.py). Also: a run survives a restart of
the api process that started it, and what the Temporal UI shows of a run (ids, search attributes,
activity summaries, and no secret anywhere in the history).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from calls.stack import WORKER_TOKEN, Org, Proc, free_port, wait_http
from realstack import FREE_ECHO, RoutineStack, no_traceback
from temporalio.api.enums.v1 import EventType
from workers import PATIENCE_S

from activities.idempotency import step_idempotency_key
from http1.server import SERVER_PROTOCOL

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

PUBLIC = "com.example.tools/probe/public@1"


@pytest.fixture(scope="module")
async def hello(routine_stack: RoutineStack) -> tuple[Org, dict[str, Any]]:
    """examples/routines/hello.yaml run once through the runs API: the org and the finished run."""
    org = routine_stack.runner()
    source = (REPO / "examples" / "routines" / "hello.yaml").read_text()
    stored = await routine_stack.store(org, source)
    assert stored.status_code == 201, stored.text
    run_id = await routine_stack.start_run(org, "hello", {"name": "ann"})
    return org, await routine_stack.final(org, run_id)


async def test_the_hello_example_runs_through_the_real_api_and_node(
    routine_stack: RoutineStack, hello: tuple[Org, dict[str, Any]]
) -> None:
    org, run = hello
    assert run["status"] == "succeeded", run
    assert run["outputs"]["greeting"] == "hello ann, again (3 friends next)"
    assert run["outputs"]["friends"] == ["1. hello ada", "2. hello grace", "3. hello linus"]
    # the first step's output file went on, as it was, as the second step's input file
    produced = {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"}
    assert run["steps"]["greet"]["output"]["file"] == produced
    assert run["outputs"]["file"] == produced
    assert all(step["attempts"] == 1 for step in run["steps"].values())
    # every step's call ran once, through the routine surface, under the run's key, with its derived key
    calls = routine_stack.calls_of(org)
    assert len(calls) == 7
    assert {c.surface for c in calls} == {"routine"} and {c.key_id for c in calls} == {org.key_id}
    workflow_id = run["workflow_id"]
    assert set(routine_stack.stored_keys(org)) == {
        *(step_idempotency_key(workflow_id, s, None) for s in ("greet", "again", "last", "done")),
        *(step_idempotency_key(workflow_id, "friends", i) for i in range(3)),
    }


async def test_the_temporal_ui_shows_the_run_by_name_and_org_and_no_secret(
    routine_stack: RoutineStack, hello: tuple[Org, dict[str, Any]]
) -> None:
    org, run = hello
    assert run["workflow_id"] == f"routine-hello-{run['run_id']}"
    handle = routine_stack.temporal_client.get_workflow_handle(run["workflow_id"])
    desc = await handle.describe()
    assert desc.workflow_type == "routine" and desc.task_queue == routine_stack.queue
    attrs = {key.name: value for key, value in desc.typed_search_attributes}
    assert (attrs["B3osRoutine"], attrs["B3osOrg"]) == ("hello", org.org_id)
    assert await desc.static_summary() == f"hello · {run['run_id']}"
    history = await handle.fetch_history()
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    echo, noop = "com.example.tools/echo/echo@1.0.0", "com.example.tools/echo/noop@1.0.0"  # the pins
    assert sorted(summaries) == sorted(
        [
            f"Greet, with a file (greet) · {echo}",  # the step's name:
            f"again · {echo}",
            f"last · {echo}",
            *(f"friends[{i}] · {echo}" for i in range(3)),
            f"done · {noop}",
        ]
    )
    # the whole history, payloads readable (text form) and as JSON: no key secret, no token
    text = "\n".join(str(e) for e in history.events) + history.to_json()
    assert "hello ann" in text and org.key_id in text  # the scan reads the payloads
    for secret in (org.key, WORKER_TOKEN, *routine_stack.node_secrets.values()):
        assert secret not in text


async def test_a_step_the_action_refuses_fails_the_run_with_the_apis_sentence(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    source = f"""\
name: refused
steps:
  - id: echo
    uses: {FREE_ECHO}
    with: {{text: "${{{{ 'x'.size() > 0 ? 5 : 6 }}}}"}}
"""
    run = await routine_stack.run(org, source)
    assert run["status"] == "failed"
    error = run["error"]
    assert error["step"] == "echo" and error["code"] == "invalid_request"
    assert error["message"] == "input.text: 5 is not of type 'string'"
    assert run["steps"]["echo"]["attempts"] == 1


def _api_at(stack: RoutineStack, port: int) -> Proc:
    argv = [sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--http", SERVER_PROTOCOL]
    argv += ["--host", "127.0.0.1"]
    proc = stack.start(f"api-{port}", [*argv, "--port", str(port), "--log-level", "warning"], stack.env())
    wait_http(f"http://127.0.0.1:{port}/healthz", proc)
    return proc


async def test_a_run_survives_a_restart_of_the_api_process_that_started_it(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = _api_at(routine_stack, port)
    released = threading.Event()

    def held(req: Recorded) -> Reply:  # each GET waits up to 4 s (the action's timeout is 5), until released
        released.wait(4)
        return Reply(200, [("Content-Type", "application/json")], b"{}")

    routine_stack.upstreams["api.example.com"].on("/public/held", held)
    naps = "".join(
        f"  - id: b{n}\n    uses: {PUBLIC}\n    with: {{path: held}}\n" for n in range(1, 7)
    )  # six steps of up to 4 s each, one after another, until the test releases them
    source = f"""\
name: restart
steps:
  - id: a
    uses: {FREE_ECHO}
    with: {{text: one}}
{naps}  - id: c
    uses: {FREE_ECHO}
    with: {{text: "${{{{ steps.a.output.text }}}}-three"}}
outputs:
  text: ${{{{ steps.c.output.text }}}}
"""
    stored = await routine_stack.store(org, source, url=url)
    assert stored.status_code == 201, stored.text
    run_id = await routine_stack.start_run(org, "restart", url=url)
    deadline = time.monotonic() + PATIENCE_S
    while not any(c.action == "public" for c in routine_stack.calls_of(org)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    api.popen.send_signal(signal.SIGKILL)  # the api that started the run dies mid-run...
    api.popen.wait(timeout=10)
    with pytest.raises(httpx.TransportError):
        await routine_stack.read(org, run_id, url=url)
    restarted = _api_at(routine_stack, port)  # ...and comes back on the same address
    try:
        mid = await routine_stack.read(org, run_id, url=url)
        assert mid["status"] == "running", mid
        assert mid["steps"]["a"]["status"] == "succeeded"  # b1 to b6 still held: 24 s for a restart
        released.set()
        run = await routine_stack.final(org, run_id, url=url)
    finally:
        released.set()
        restarted.stop()
    assert run["status"] == "succeeded" and run["outputs"] == {"text": "one-three"}, run
    assert [s["attempts"] for s in run["steps"].values()] == [1] * 8
    assert len(routine_stack.calls_of(org)) == 8
    no_traceback([restarted])
