# ruff: noqa: E501
"""Poll triggers on the real stack (tests/realstack.py): a routine on `io.b3os/github/issue-created@1`
gets a Temporal Schedule whose `trigger-poll` workflows poll the GitHub stand-in through the real egress
proxy (the token injected there); the first poll only remembers what it sees (a new subscription starts
from now); each new issue starts one run with the event, whatever the number of polls that see it; an
upstream 429 is waited its Retry-After; the cursor is kept."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import loopback
import pytest
from calls.stack import Org
from realstack import FREE_ECHO, RoutineStack
from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy
from temporalio.service import RPCError, RPCStatusCode

from engine.polls import POLL_WORKFLOW_TYPE, poll_schedule_id

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

SECRET = "ghp_poll-token-0123456789abcdef"
WATCH = f"""\
name: watch-issues
on:
  - trigger: io.b3os/github/issue-created@1
    with: {{owner: octo, repo: feed}}
steps:
  - id: say
    uses: {FREE_ECHO}
    with: {{text: "new #${{{{ event.number }}}} ${{{{ event.title }}}} in ${{{{ event.repository }}}}"}}
"""


def issue(n: int) -> dict[str, Any]:
    return {
        "id": 1000 + n,
        "number": n,
        "title": f"issue {n}",
        "body": None,
        "html_url": f"https://github.com/octo/feed/issues/{n}",
        "user": {"login": "ada"},
        "labels": [],
        "created_at": f"2026-12-0{n}T10:00:00Z",
    }


def rows(stack: RoutineStack, org: Org, sub_id: str) -> list[dict[str, Any]]:
    r = loopback.request(
        "GET", f"{stack.url}/v1/triggers/subscriptions/{sub_id}/deliveries", headers=org.headers
    )
    assert r.status_code == 200, r.text
    return list(r.json()["deliveries"])


async def until(check: Any, what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def test_polls_start_each_new_issue_once_from_now_through_the_egress_proxy(
    routine_stack: RoutineStack,
) -> None:
    gh = routine_stack.upstreams["api.github.com"]
    answers: list[Reply] = []
    seen: list[Recorded] = []
    times: list[float] = []

    def feed(req: Recorded) -> Reply:
        seen.append(req)
        times.append(time.monotonic())
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def listing(*numbers: int) -> Reply:
        return Reply(
            200, [("Content-Type", "application/json")], json.dumps([issue(n) for n in numbers]).encode()
        )

    answers.append(listing(2, 1))
    gh.on("/repos/octo/feed/issues", feed)
    org = routine_stack.org(scopes=("routines:run", "routines:read", "actions:call", "connections:write"))
    added = loopback.request(
        "POST",
        f"{routine_stack.url}/v1/connections",
        headers=org.headers,
        timeout=30,
        json={"pack": "io.b3os/github", "connection": "token", "secret": SECRET},
    )
    assert added.status_code == 201, added.text
    stored = await routine_stack.store(org, WATCH)
    assert stored.status_code == 201, stored.text
    r = loopback.request("GET", f"{routine_stack.url}/v1/triggers/subscriptions", headers=org.headers)
    (sub,) = r.json()["subscriptions"]
    assert (sub["kind"], sub["hook_url"], sub["with"]) == ("poll", None, {"owner": "octo", "repo": "feed"})

    # the Temporal Schedule, as the Temporal UI lists it, polled at once: the first poll only remembers
    handle = routine_stack.temporal_client.get_schedule_handle(poll_schedule_id(sub["id"], "watch-issues"))
    described = await handle.describe()
    assert isinstance(described.schedule.action, ScheduleActionStartWorkflow)
    assert described.schedule.action.workflow == POLL_WORKFLOW_TYPE
    first = await until(
        lambda: len(rows(routine_stack, org, sub["id"])) == 2 and rows(routine_stack, org, sub["id"]),
        "no first poll",
    )
    assert {(d["status"], d["event_id"], d["reason"]) for d in first} == {
        ("ignored", "1001", "seen by the first poll: a new subscription starts from now"),
        ("ignored", "1002", "seen by the first poll: a new subscription starts from now"),
    }
    assert seen[0].header("Authorization") == f"Bearer {SECRET}"  # injected by the egress proxy
    assert seen[0].query["sort"] == ["created"] and "since" not in seen[0].query  # no cursor yet

    # issue 3 is new: one run; the next poll sees it again and starts nothing
    answers[:] = [listing(3, 2, 1)]
    await handle.trigger(overlap=ScheduleOverlapPolicy.BUFFER_ONE)  # after a poll still ending
    started = await until(
        lambda: [d for d in rows(routine_stack, org, sub["id"]) if d["event_id"] == "1003" and d["run_id"]],
        "issue 3 started no run",
    )
    assert seen[1].query["since"] == ["2026-12-02T10:00:00Z"]  # the cursor the first poll kept
    run = await routine_stack.final(org, started[0]["run_id"])
    assert run["steps"]["say"]["output"] == {"text": "new #3 issue 3 in octo/feed"}
    polls = len(seen)
    await handle.trigger(overlap=ScheduleOverlapPolicy.BUFFER_ONE)  # after a poll still ending
    await until(lambda: len(seen) > polls, "no third poll")
    await asyncio.sleep(0.5)
    assert [d["event_id"] for d in rows(routine_stack, org, sub["id"])].count("1003") == 1
    assert seen[-1].query["since"] == ["2026-12-03T10:00:00Z"]

    # the upstream asks to wait: the poll waits its Retry-After, then sees issue 4
    answers[:] = [Reply(429, [("Retry-After", "1")], b'{"message": "rate limited"}'), listing(4, 3, 2, 1)]
    polls = len(seen)
    await handle.trigger(overlap=ScheduleOverlapPolicy.BUFFER_ONE)  # after a poll still ending
    four = await until(
        lambda: [d for d in rows(routine_stack, org, sub["id"]) if d["event_id"] == "1004" and d["run_id"]],
        "issue 4 started no run",
    )
    # the 429 and the poll after it; each request's query and when it came (from the first), if not.
    # The schedule fires by itself too, every `everyS` from the epoch: when the test crosses such a
    # moment, one more poll comes, before the 429 (and takes it) or after issue 4 (its cursor moved on)
    asked = [(r.query.get("since"), round(t - times[0], 2)) for r, t in zip(seen, times, strict=True)]
    after = list(zip(seen[polls:], times[polls:], strict=True))
    assert len(after) >= 2, asked
    (limited, limited_at), (retried, retried_at) = after[:2]
    assert limited.query.get("since") == retried.query.get("since") == ["2026-12-03T10:00:00Z"], asked
    assert retried_at - limited_at >= 1.0, asked  # the upstream's Retry-After, waited
    assert all(r.query.get("since") == ["2026-12-04T10:00:00Z"] for r, _ in after[2:]), asked
    assert [d["event_id"] for d in rows(routine_stack, org, sub["id"])].count("1004") == 1
    assert four[0]["status"] == "started"
    r = loopback.request("GET", f"{routine_stack.url}/v1/runs?routine=watch-issues", headers=org.headers)
    assert len(r.json()["runs"]) == 2

    # each poll is a workflow of its own, as the Temporal UI lists them under the routine
    query = f"WorkflowType = '{POLL_WORKFLOW_TYPE}' AND WorkflowId STARTS_WITH 'trigger-poll-{sub['id']}'"
    polled = [w async for w in routine_stack.temporal_client.list_workflows(query)]
    assert len(polled) >= 4 and all(
        w.search_attributes.get("B3osRoutine") == ["watch-issues"] for w in polled
    )

    # storing the routine without the trigger ends the subscription and deletes its schedule
    plain = f"name: watch-issues\nsteps:\n  - id: say\n    uses: {FREE_ECHO}\n    with: {{text: hi}}\n"
    assert (await routine_stack.store(org, plain)).status_code == 201
    with pytest.raises(RPCError) as gone:
        await handle.describe()
    assert gone.value.status == RPCStatusCode.NOT_FOUND
