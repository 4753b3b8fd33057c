"""HTTP actions as routine steps on the real stack: examples/routines/places.yaml chains the Open-Meteo
search (through the real egress proxy, to a loopback stand-in of its host) into the echo tool; an
upstream 429 with Retry-After: 2 is waited exactly that long, measured from the workflow history; a
connection's secret appears in no answer, log, workflow history or database file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import loopback
from realstack import RoutineStack
from test_workflow import SCHEDULED, STARTED, at, events, failure_details

from activities.idempotency import step_idempotency_key

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

PLACES = REPO / "examples" / "routines" / "places.yaml"
BERLIN = {"name": "Berlin", "latitude": 52.52, "longitude": 13.41, "timezone": "Europe/Berlin"}
PUBLIC = "com.example.tools/probe/public@1"


def json_reply(body: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, [("Content-Type", "application/json"), *(headers or [])], json.dumps(body).encode())


async def test_places_chains_an_http_action_into_the_echo_tool_and_records_each_pin(
    routine_stack: RoutineStack,
) -> None:
    geo = routine_stack.upstreams["geocoding-api.open-meteo.com"]
    geo.on(
        "/v1/search", lambda req: json_reply({"results": [BERLIN]} if req.query["name"] == ["Berlin"] else {})
    )
    org = routine_stack.runner()
    run = await routine_stack.run(org, PLACES.read_text())
    assert run["status"] == "succeeded", run
    assert run["outputs"] == {"found": 1, "said": "Berlin is at 52.52, 13.41"}
    assert run["steps"]["search"]["ref"] == "io.b3os/open-meteo/search-places@1.0.0"
    assert run["steps"]["say"]["ref"] == "com.example.tools/echo/echo@1.0.0"
    missing = await routine_stack.run(org, PLACES.read_text(), {"place": "Atlantis"})
    assert missing["outputs"] == {"found": 0, "said": "no place called Atlantis"}
    assert missing["steps"]["say"]["status"] == "skipped"


async def test_an_upstream_429_makes_the_step_wait_exactly_its_retry_after(
    routine_stack: RoutineStack,
) -> None:
    api = routine_stack.upstreams["api.example.com"]
    seen: list[Recorded] = []

    def busy_once(req: Recorded) -> Reply:
        seen.append(req)
        if len(seen) == 1:
            return json_reply({"message": "slow down"}, 429, [("Retry-After", "2")])
        return json_reply({"ok": True})

    api.on("/public/busy-once", busy_once)
    org = routine_stack.runner()
    source = f"name: busy\nsteps:\n  - id: get\n    uses: {PUBLIC}\n    with: {{path: busy-once}}\n"
    run = await routine_stack.run(org, source)
    assert run["status"] == "succeeded" and run["steps"]["get"]["attempts"] == 2, run
    assert run["steps"]["get"]["output"] == {"ok": True}
    history = await routine_stack.history(run["workflow_id"])
    (scheduled,) = events(history, SCHEDULED)
    (started,) = events(history, STARTED)
    first = failure_details(started)
    assert (first["code"], first["reason"], first["status"], first["retry_after"]) == (
        "rate_limited",
        "upstream",
        429,
        2,
    )
    assert first["idempotency_key"] == step_idempotency_key(run["workflow_id"], "get", None)
    last_failure = started.activity_task_started_event_attributes.last_failure
    assert last_failure.application_failure_info.next_retry_delay.seconds == 2  # the wait asked of Temporal
    # never before Retry-After; the task's dispatch after it takes longer on a busy machine (3.1 s once),
    # so the bound above is loose
    waited = at(started) - at(scheduled)
    assert 2 <= waited < 2 + 5, waited
    assert len(seen) == 2  # one request per attempt; the 429 was not billed, the success once
    usage = loopback.get(f"{routine_stack.url}/v1/usage", headers=org.headers, timeout=30).json()
    assert usage["units"]["actions.call"] == 1 and usage["cost"]["total"] == 210


async def test_a_connection_secret_appears_in_no_answer_log_history_or_database(
    routine_stack: RoutineStack,
) -> None:
    secret = "sk-never-seen-9f8e7d6c5b4a39281706"
    api = routine_stack.upstreams["api.example.com"]
    api.on("/items/5", json_reply({"id": 5}))
    api.on("/items/6", json_reply({"message": "gone"}, 404))
    org = routine_stack.org(
        scopes=("routines:run", "routines:read", "actions:call", "connections:write", "connections:read")
    )
    answers: list[str] = []
    async with loopback.async_client(base_url=routine_stack.url, headers=org.headers, timeout=60) as http:
        added = await http.post(
            "/v1/connections",
            json={"pack": "com.example.tools/probe", "connection": "token", "secret": secret},
        )
        answers += [added.text, (await http.get("/v1/connections")).text]
        bad = await http.post(
            "/v1/connections",
            json={"pack": "com.example.tools/probe", "connection": "token", "secret": {"x": secret}},
        )
        assert bad.status_code == 400
        answers.append(bad.text)
    source = (
        "name: secretive\nsteps:\n"
        "  - id: ok\n    uses: com.example.tools/probe/get@1\n    with: {id: 5}\n"
        "  - id: gone\n    uses: com.example.tools/probe/get@1\n    with: {id: 6}\n"
    )
    run = await routine_stack.run(org, source)
    assert run["steps"]["ok"]["output"] == {"item": {"id": 5}, "region": "eu"}
    assert run["steps"]["gone"]["error"]["pack_error"]["code"] == "no_item"
    answers.append(json.dumps(run))
    assert any(r.header("Authorization") == f"Bearer {secret}" for r in api.requests)  # it was used
    history = await routine_stack.history(run["workflow_id"])
    needle = secret.encode()
    assert not any(needle in event.SerializeToString() for event in history)
    assert not any(secret in answer for answer in answers)
    logs = [p.log for p in routine_stack.procs] + [routine_stack.egress.log]  # type: ignore[union-attr]
    assert not [str(log) for log in logs if needle in log.read_bytes()]
    state = routine_stack.root / "state"
    assert not [str(f) for f in state.rglob("*") if f.is_file() and needle in f.read_bytes()]


async def test_a_429_does_not_use_up_max_attempts_waiting_is_not_failing(routine_stack: RoutineStack) -> None:
    api = routine_stack.upstreams["api.example.com"]
    seen: list[Recorded] = []

    def busy_twice(req: Recorded) -> Reply:
        seen.append(req)
        if len(seen) <= 2:
            return json_reply({"message": "slow down"}, 429, [("Retry-After", "1")])
        return json_reply({"ok": True})

    api.on("/public/busy-twice", busy_twice)
    org = routine_stack.runner()
    source = (
        f"name: patient\nsteps:\n  - id: get\n    uses: {PUBLIC}\n    with: {{path: busy-twice}}\n"
        "    retry: {max-attempts: 1}\n"
    )
    run = await routine_stack.run(org, source)
    assert run["status"] == "succeeded", run  # two refusals waited out, though only one attempt may fail
    assert run["steps"]["get"]["attempts"] == 3 and len(seen) == 3


async def test_a_retryable_failure_still_counts_against_max_attempts(routine_stack: RoutineStack) -> None:
    api = routine_stack.upstreams["api.example.com"]
    api.on("/items/500", json_reply({"message": "oops"}, 500))
    org = routine_stack.org(scopes=("routines:run", "routines:read", "actions:call", "connections:write"))
    async with loopback.async_client(base_url=routine_stack.url, headers=org.headers, timeout=30) as http:
        added = await http.post(
            "/v1/connections",
            json={"pack": "com.example.tools/probe", "connection": "token", "secret": "sk-flaky-0123456789"},
        )
        assert added.status_code == 201, added.text
    source = (
        "name: flaky\nsteps:\n  - id: get\n    uses: com.example.tools/probe/get@1\n    with: {id: 500}\n"
        "    retry: {max-attempts: 2, backoff: 100ms}\n"
    )
    run = await routine_stack.run(org, source)
    step = run["steps"]["get"]
    assert run["status"] == "failed" and step["attempts"] == 2, run  # the pack's flaky error is retryable
    assert step["error"]["pack_error"]["code"] == "flaky" and step["error"]["retryable"] is True
