"""The SDK's routines, runs, usage and connections against the real stack (Temporal, the worker, a node)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from realstack import FREE_FAIL, RoutineStack
from workers import PATIENCE_S

from b3os import B3OS, AsyncB3OS, Conflict, InvalidRequest, NotFound

from . import routines

GREET = routines.greet("sdk-greet")


def _napping(name: str, seconds: int) -> str:
    """A routine `name` of one step, `nap`, that sleeps `seconds`."""
    step = f"  - id: nap\n    uses: {FREE_FAIL}\n    with: {{mode: sleep, seconds: {seconds}}}\n"
    return f"name: {name}\nsteps:\n{step}"


SLOW = _napping("sdk-slow", 20)
NAP = _napping("sdk-nap", 1)
CONNECTOR_SCOPES = ("connections:write", "connections:read")


def test_estimate_gives_the_ceiling_and_a_run_over_its_max_is_refused(stack: RoutineStack) -> None:
    with B3OS(stack.url, stack.runner().key) as b3os:
        b3os.routines.put(GREET)
        estimate = b3os.routines.estimate("sdk-greet", {"who": "ann"})
        # free echo calls: each attempt at most 234 of compute and 10 of floor, 3 attempts; loud counted
        assert [(s["id"], s["ceiling_microusd"]) for s in estimate["steps"]] == [
            ("greet", 732),
            ("twice", 732),
            ("loud", 732),
        ]
        assert estimate["ceiling_microusd"] == 2196
        other = b3os.routines.estimate(
            "sdk-greet", {}, yaml_text=GREET.replace("id: greet", "id: hi").replace("steps.greet", "steps.hi")
        )
        assert other["ceiling_microusd"] == 2196 and other["steps"][0]["id"] == "hi"
        with pytest.raises(InvalidRequest) as refused:
            b3os.routines.run("sdk-greet", {"who": "ann"}, max_cost_microusd=2195)
        assert refused.value.body["field"] == "max_cost_microusd" and refused.value.reason == "max_cost"
        run = b3os.runs.wait(b3os.routines.run("sdk-greet", {"who": "ann"}, max_cost_microusd=2196)["run_id"])
        assert run["status"] == "succeeded" and run["max_cost_microusd"] == 2196
        assert 0 < b3os.usage()["cost"]["total"] <= 2196


def test_put_run_and_wait_tell_each_step_as_it_finishes(stack: RoutineStack) -> None:
    seen: list[tuple[str, str, Any]] = []
    with B3OS(stack.url, stack.runner().key) as b3os:
        stored = b3os.routines.put(GREET)
        assert (stored["name"], stored["version"]) == ("sdk-greet", 1)
        assert stored["steps"] == ["greet", "twice", "loud"]
        assert b3os.routines.put(GREET)["version"] == 2
        assert [r["name"] for r in b3os.routines.list()] == ["sdk-greet"]
        stored = b3os.routines.get("sdk-greet")
        assert stored["version"] == 2 and "who" in stored["inputs"]
        started = b3os.routines.run("sdk-greet", {"who": "ann"}, idempotency_key="greet-ann")
        assert (
            b3os.routines.run("sdk-greet", {"who": "ann"}, idempotency_key="greet-ann")["run_id"]
            == (started["run_id"])
        )  # the same key: the same run
        run = b3os.runs.wait(
            started["run_id"],
            on_step=lambda sid, step: seen.append((sid, step["status"], step.get("output"))),
        )
        assert run["status"] == "succeeded" and run["outputs"] == {"said": "hello ann!"}
        assert seen == [
            ("greet", "succeeded", {"text": "hello ann"}),
            ("twice", "succeeded", {"text": "hello ann!"}),
            ("loud", "skipped", None),
        ]
        steps = b3os.runs.get(started["run_id"])["steps"]
        assert steps["twice"]["ref"] == "com.example.tools/free/echo@1.0.0"
        listed = b3os.runs.list(routine="sdk-greet")
        assert [r["run_id"] for r in listed] == [started["run_id"]]
        with pytest.raises(InvalidRequest):
            b3os.routines.put("name: broken\nsteps: []\n")
        with pytest.raises(NotFound):
            b3os.routines.run("no-such-routine")


def test_a_read_may_wait_for_the_runs_end_and_wait_sees_the_end_as_it_comes(stack: RoutineStack) -> None:
    with B3OS(stack.url, stack.runner().key) as b3os:
        b3os.routines.put(NAP)
        first = b3os.routines.run("sdk-nap")["run_id"]
        ended = b3os.runs.get(first, wait_s=30)  # one read, answered when the run has ended
        assert ended["status"] == "succeeded" and ended["steps"]["nap"]["status"] == "succeeded"
        second = b3os.routines.run("sdk-nap")["run_id"]
        began = time.monotonic()
        assert b3os.runs.wait(second, poll_interval_s=30)["status"] == "succeeded"
        assert time.monotonic() - began < 20  # its end, not the 30 s between reads, ended the wait


def test_a_running_run_is_cancelled_and_a_finished_one_is_a_conflict(stack: RoutineStack) -> None:
    with B3OS(stack.url, stack.runner().key) as b3os:
        b3os.routines.put(SLOW)
        run_id = b3os.routines.run("sdk-slow")["run_id"]
        deadline = time.monotonic() + PATIENCE_S
        while b3os.runs.get(run_id)["steps"].get("nap", {}).get("status") != "running":
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.1)
        assert b3os.runs.cancel(run_id) == {"run_id": run_id, "status": "cancelling"}
        assert b3os.runs.wait(run_id, timeout_s=30)["status"] == "cancelled"
        with pytest.raises(Conflict) as ended:
            b3os.runs.cancel(run_id)
    assert ended.value.status == 409


async def test_async_runs_wait_awaits_a_coroutine_callback(stack: RoutineStack) -> None:
    seen: list[str] = []

    async def on_step(step_id: str, step: dict[str, Any]) -> None:
        seen.append(f"{step_id}:{step['status']}")

    async with AsyncB3OS(stack.url, stack.runner().key) as b3os:
        await b3os.routines.put(GREET)
        started = await b3os.routines.run("sdk-greet", {"who": "bo"})
        run = await b3os.runs.wait(started["run_id"], on_step=on_step)
    assert run["outputs"] == {"said": "hello bo!"}
    assert seen == ["greet:succeeded", "twice:succeeded", "loud:skipped"]


def test_usage_is_the_months_charges(stack: RoutineStack) -> None:
    with B3OS(stack.url, stack.org().key) as b3os:
        b3os.actions.call("com.example.tools/echo/noop@1")
        now = b3os.usage()
        month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
        assert now["month"] == month and b3os.usage(month) == now
        assert now["calls"] == 1 and now["cost"]["total"] > 0
        assert b3os.usage("2001-01")["calls"] == 0


def test_connections_are_added_listed_and_removed_without_the_secret(stack: RoutineStack) -> None:
    secret = "sk-sdk-test-0123456789abcdef"
    with B3OS(stack.url, stack.org(scopes=CONNECTOR_SCOPES).key) as b3os:
        added = b3os.connections.add("com.example.tools/probe", "token", secret, {"region": "us"})
        assert (added["connection"], added["kind"], added["params"], added["hint"]) == (
            "token",
            "bearer",
            {"region": "us"},
            "cdef",
        )
        listed = b3os.connections.list()
        assert [c["id"] for c in listed] == [added["id"]] and secret not in repr(listed)
        assert b3os.connections.remove(added["id"]) is None
        assert b3os.connections.list() == []
        with pytest.raises(NotFound) as gone:
            b3os.connections.remove(added["id"])
        with pytest.raises(InvalidRequest) as wrong:
            b3os.connections.add("com.example.tools/probe", "token", {"not": "a text"})
    assert gone.value.code == "not_found" and wrong.value.body["field"] == "secret"
