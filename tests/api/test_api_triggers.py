# ruff: noqa: E501
"""Webhook triggers on the real stack (tests/realstack.py): a routine stored with `on: [{trigger: ...}]`
subscribes; a delivery signed as GitHub signs (X-Hub-Signature-256) starts one run with the event in its
steps; a forged one is refused and recorded; a redelivery starts nothing; a delivery stored while runs
cannot start is started later by another api process; storing the routine again keeps or ends the
subscription."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import loopback
import pytest
from calls.stack import Org
from realstack import FREE_ECHO, FREE_FAIL, RoutineStack
from workers import free_port

from engine.resolvers import RegistryResolver
from engine.validate import RoutineError, load_routine

TRIAGE = f"""\
name: triage
inputs:
  team: {{type: string, default: core}}
on:
  - trigger: io.b3os/github/issue-opened@1
    inputs: {{team: ops}}
steps:
  - id: say
    uses: {FREE_ECHO}
    with: {{text: "${{{{ inputs.team }}}}: #${{{{ event.number }}}} ${{{{ event.title }}}} by ${{{{ event.author }}}}"}}
outputs:
  repository: ${{{{ event.repository }}}}
"""


def issue_opened(number: int, title: str) -> bytes:
    """An `issues` delivery's body as GitHub sends it (the fields the trigger reads, and more)."""
    return json.dumps(
        {
            "action": "opened",
            "issue": {
                "number": number,
                "title": title,
                "body": "It crashes.",
                "html_url": f"https://github.com/octo/app/issues/{number}",
                "user": {"login": "ada", "id": 1},
                "labels": [{"name": "bug"}],
            },
            "repository": {"full_name": "octo/app"},
            "sender": {"login": "ada"},
        }
    ).encode()


def signed(secret: str, body: bytes, delivery: str, event: str = "issues") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def subscription(stack: RoutineStack, org: Org, routine: str = "triage") -> dict[str, Any]:
    r = loopback.request(
        "GET", f"{stack.url}/v1/triggers/subscriptions?routine={routine}", headers=org.headers
    )
    assert r.status_code == 200, r.text
    (sub,) = r.json()["subscriptions"]
    return dict(sub)


def deliveries(stack: RoutineStack, org: Org, sub_id: str) -> list[dict[str, Any]]:
    r = loopback.request(
        "GET", f"{stack.url}/v1/triggers/subscriptions/{sub_id}/deliveries", headers=org.headers
    )
    assert r.status_code == 200, r.text
    return list(r.json()["deliveries"])


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return loopback.request("POST", url, content=body, headers=headers, timeout=30)


async def started(stack: RoutineStack, org: Org, sub_id: str, delivery_id: str, timeout_s: float = 60) -> str:
    """Wait until a delivery's run has started; its run id."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = next(d for d in deliveries(stack, org, sub_id) if d["id"] == delivery_id)
        if row["run_id"]:
            assert row["status"] == "started", row
            return str(row["run_id"])
        assert time.monotonic() < deadline, f"delivery {delivery_id} never started: {row}"
        await asyncio.sleep(0.2)


def runs_of(stack: RoutineStack, org: Org, routine: str) -> list[dict[str, Any]]:
    r = loopback.request("GET", f"{stack.url}/v1/runs?routine={routine}", headers=org.headers)
    return list(r.json()["runs"])


async def test_a_signed_delivery_starts_one_run_with_the_event_and_a_redelivery_starts_nothing(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    stored = await routine_stack.store(org, TRIAGE)
    assert stored.status_code == 201, stored.text
    sub = subscription(routine_stack, org)
    assert (sub["trigger"], sub["pin"], sub["kind"]) == (
        "io.b3os/github/issue-opened@1",
        "io.b3os/github/issue-opened@1.0.0",
        "webhook",
    )
    assert sub["hook_url"] == f"{routine_stack.url}/v1/hooks/{sub['id']}"
    assert sub["webhook_secret"].startswith("b3whs_")

    body, delivery = issue_opened(42, "Crash on start"), str(uuid.uuid4())
    first = post(sub["hook_url"], body, signed(sub["webhook_secret"], body, delivery))
    assert first.status_code == 202, first.text
    (accepted,) = first.json()["deliveries"]
    assert (accepted["status"], accepted["event_id"], accepted["verified"]) == ("pending", delivery, True)
    run_id = await started(routine_stack, org, sub["id"], accepted["id"])
    run = await routine_stack.final(org, run_id)
    assert run["status"] == "succeeded", run
    assert run["steps"]["say"]["output"] == {"text": "ops: #42 Crash on start by ada"}
    assert run["outputs"] == {"repository": "octo/app"}
    rerun = loopback.request(
        "POST",
        f"{routine_stack.url}/v1/runs/{run_id}/rerun",
        headers=org.headers,
        json={"from": "say"},
        timeout=30,
    )
    assert rerun.status_code == 201, rerun.text
    again_run = await routine_stack.final(org, rerun.json()["run_id"])
    assert again_run["steps"]["say"]["output"] == {"text": "ops: #42 Crash on start by ada"}  # the same event

    # GitHub redelivers the same delivery (same X-GitHub-Delivery), to the other api process too
    for url in routine_stack.api_urls:
        again = post(f"{url}/v1/hooks/{sub['id']}", body, signed(sub["webhook_secret"], body, delivery))
        assert again.status_code == 202, again.text
        assert [d["status"] for d in again.json()["deliveries"]] == ["duplicate"]
    await asyncio.sleep(0.5)
    assert sorted(r["run_id"] for r in runs_of(routine_stack, org, "triage")) == sorted(
        [run_id, again_run["run_id"]]
    )

    # an event of another kind is recorded and starts nothing
    ping = post(
        sub["hook_url"], b'{"zen": "hi"}', signed(sub["webhook_secret"], b'{"zen": "hi"}', "p-1", "ping")
    )
    assert [d["status"] for d in ping.json()["deliveries"]] == ["ignored"]


async def test_a_forged_or_unsigned_delivery_is_refused_and_recorded(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, TRIAGE)).status_code == 201
    sub = subscription(routine_stack, org)
    body = issue_opened(7, "Forged")
    forged = post(sub["hook_url"], body, signed("b3whs_not-the-secret", body, "d-forged"))
    assert forged.status_code == 401, forged.text
    assert forged.json()["error"]["message"] == (
        "The delivery is refused and recorded: the X-Hub-Signature-256 signature does not match the body "
        "signed with this subscription's secret."
    )
    tampered = post(sub["hook_url"], issue_opened(7, "Tampered"), signed(sub["webhook_secret"], body, "d-2"))
    assert tampered.status_code == 401
    unsigned = post(sub["hook_url"], body, {"Content-Type": "application/json", "X-GitHub-Event": "issues"})
    assert unsigned.status_code == 401
    rows = deliveries(routine_stack, org, sub["id"])
    assert [(d["status"], d["verified"], d["run_id"]) for d in rows] == [("refused", False, None)] * 3
    assert rows[0]["reason"] == "the X-Hub-Signature-256 header is missing: the delivery is not signed"
    assert runs_of(routine_stack, org, "triage") == []
    unknown = post(f"{routine_stack.url}/v1/hooks/trg_nosuchsubscription0", body, {})
    assert unknown.status_code == 404
    # a body that is not JSON (GitHub can send a form) is verified and recorded like any other
    form = b"payload=%7B%22action%22%3A%22opened%22%7D"
    headers = {
        **signed(sub["webhook_secret"], form, "d-form"),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    accepted = post(sub["hook_url"], form, headers)
    assert accepted.status_code == 202, accepted.text
    assert [(d["status"], d["reason"]) for d in accepted.json()["deliveries"]] == [
        ("refused", "the body is not JSON")
    ]
    forged_form = post(sub["hook_url"], form, {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64})
    assert forged_form.status_code == 401
    assert len(deliveries(routine_stack, org, sub["id"])) == 5


async def test_a_delivery_stored_while_runs_cannot_start_is_started_after_its_api_is_gone(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, TRIAGE)).status_code == 201
    sub = subscription(routine_stack, org)
    # an api process whose Temporal is unreachable: it stores the delivery, and cannot start its run
    dead = f"127.0.0.1:{free_port()}"
    url, proc = routine_stack.start_api(extra_env={"B3OS_TEMPORAL_ADDRESS": dead}, listed=False)
    body = issue_opened(9, "Stored first")
    r = post(f"{url}/v1/hooks/{sub['id']}", body, signed(sub["webhook_secret"], body, "d-restart"))
    assert r.status_code == 202, r.text
    (row,) = r.json()["deliveries"]
    assert (row["status"], row["run_id"]) == ("pending", None)  # stored; no run started
    proc.stop()  # the api goes away between the delivery and its run
    # the stack's api processes start what is pending (their retry loop)
    run_id = await started(routine_stack, org, sub["id"], row["id"])
    run = await routine_stack.final(org, run_id)
    assert run["steps"]["say"]["output"] == {"text": "ops: #9 Stored first by ada"}


async def test_storing_the_routine_again_keeps_its_address_and_without_the_trigger_ends_it(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, TRIAGE)).status_code == 201
    before = subscription(routine_stack, org)
    assert (await routine_stack.store(org, TRIAGE.replace("team: ops", "team: web"))).status_code == 201
    after = subscription(routine_stack, org)
    assert (after["id"], after["webhook_secret"], after["inputs"]) == (
        before["id"],
        before["webhook_secret"],
        {"team": "web"},
    )
    plain = (
        TRIAGE.replace("  - trigger: io.b3os/github/issue-opened@1\n    inputs: {team: ops}\n", "")
        .replace("on:\n", "")
        .replace("${{ event.number }} ${{ event.title }} by ${{ event.author }}", "hi")
        .replace("${{ event.repository }}", "x")
    )
    assert (await routine_stack.store(org, plain)).status_code == 201
    r = loopback.request(
        "GET", f"{routine_stack.url}/v1/triggers/subscriptions?ended=true", headers=org.headers
    )
    (ended,) = r.json()["subscriptions"]
    assert ended["id"] == before["id"] and ended["ended_at"] is not None and ended["webhook_secret"] is None
    body = issue_opened(1, "Late")
    assert post(before["hook_url"], body, signed(before["webhook_secret"], body, "d-late")).status_code == 404


async def test_b3os_trigger_list_deliveries_and_replay(routine_stack: RoutineStack) -> None:
    org = routine_stack.runner()
    assert (await routine_stack.store(org, TRIAGE)).status_code == 201
    sub = subscription(routine_stack, org)
    body = issue_opened(5, "Once more")
    r = post(sub["hook_url"], body, signed(sub["webhook_secret"], body, "d-cli"))
    (first,) = r.json()["deliveries"]
    first_run = await started(routine_stack, org, sub["id"], first["id"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=routine_stack.url, B3OS_API_KEY=org.key)

    def b3os(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cli.main", "trigger", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    listed = b3os("list")
    assert listed.returncode == 0, listed.stderr
    assert sub["id"] in listed.stdout and "io.b3os/github/issue-opened@1.0.0" in listed.stdout
    assert sub["hook_url"] in listed.stdout and sub["webhook_secret"] not in listed.stdout
    shown = b3os("deliveries", sub["id"])
    assert shown.returncode == 0, shown.stderr
    assert "started" in shown.stdout and first_run in shown.stdout and "d-cli" in shown.stdout
    replayed = b3os("replay", sub["id"], first["id"])
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith(f"replaying {first['id']} as dlv_") and "pending" in replayed.stdout
    new_id = replayed.stdout.split(" as ")[1].split()[0]
    second_run = await started(routine_stack, org, sub["id"], new_id)
    assert second_run != first_run
    assert (await routine_stack.final(org, second_run))["steps"]["say"]["output"] == {
        "text": "ops: #5 Once more by ada"
    }
    missing = b3os("deliveries", "trg_nosuchsubscription0")
    assert missing.returncode == 1 and "has no trigger subscription trg_nosuchsubscription0" in missing.stderr


SLOW_TRIAGE = f"""\
name: slow-triage
on:
  - trigger: io.b3os/github/issue-opened@1
steps:
  - id: nap
    uses: {FREE_FAIL}
    foreach: "${{{{ event.number == 1 ? {list(range(40))} : [0] }}}}"
    with: {{mode: sleep, seconds: 4}}
  - id: say
    uses: {FREE_ECHO}
    with: {{text: "#${{{{ event.number }}}}"}}
"""


async def counted_running(stack: RoutineStack, org: Org) -> None:
    """Wait until Temporal's visibility counts a running run of the organization (it is eventually
    consistent: the api's run limit reads it)."""
    query = f"B3osOrg = '{org.org_id}' AND ExecutionStatus = 'Running'"
    deadline = time.monotonic() + 60
    while (await stack.temporal_client.count_workflows(query)).count < 1:
        assert time.monotonic() < deadline, "Temporal never counted the first run as running"
        await asyncio.sleep(0.1)


async def test_a_burst_past_the_organizations_run_limit_waits_and_each_event_runs_once(
    routine_stack: RoutineStack,
) -> None:
    url, proc = routine_stack.start_api(
        extra_env={"B3OS_RUNS_PER_ORG": "1", "B3OS_TRIGGER_RETRY_S": "0.5"}, listed=False
    )
    try:
        org = routine_stack.runner()
        assert (await routine_stack.store(org, SLOW_TRIAGE, url=url)).status_code == 201
        sub = subscription(routine_stack, org, "slow-triage")
        hook = f"{url}/v1/hooks/{sub['id']}"
        ids = []
        for n in (1, 2, 3):
            body = issue_opened(n, f"burst {n}")
            r = post(hook, body, signed(sub["webhook_secret"], body, f"d-burst-{n}"))
            assert r.status_code == 202, r.text
            ids.append(r.json()["deliveries"][0]["id"])
            if n == 1:  # its run (~40 s) started and counted by Temporal's visibility, which the limit reads
                first = await started(routine_stack, org, sub["id"], ids[0])
                await counted_running(routine_stack, org)
        # each later event waits: pending, saying why. (The stack's own api, whose limit is the default,
        # may start a waiting one in its retry round: the event was still refused first, attempts 2.)
        deadline = time.monotonic() + 60
        while True:
            later = [d for d in deliveries(routine_stack, org, sub["id"]) if d["id"] in ids[1:]]
            if any("already has 1 runs running" in (d["last_error"] or "") for d in later):
                break
            if all(d["run_id"] for d in later):
                assert all(d["attempts"] >= 2 for d in later), later
                break
            assert time.monotonic() < deadline, f"no event waited for the organization's run limit: {later}"
            await asyncio.sleep(0.1)
        assert loopback.post(f"{url}/v1/runs/{first}/cancel", headers=org.headers).status_code == 202
        runs = [first] + [await started(routine_stack, org, sub["id"], i, timeout_s=120) for i in ids[1:]]
        assert len(set(runs)) == 3
        assert (await routine_stack.final(org, first, url=url))["status"] == "cancelled"
        texts = [
            (await routine_stack.final(org, r, url=url))["steps"]["say"]["output"]["text"] for r in runs[1:]
        ]
        assert texts == ["#2", "#3"]
        assert len(runs_of(routine_stack, org, "slow-triage")) == 3
    finally:
        proc.stop()


def test_a_routine_on_a_trigger_is_checked_against_the_api_registry_as_the_cli_does(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    with RegistryResolver(routine_stack.url, org.key) as registry:
        routine = load_routine(TRIAGE, "triage.yaml", registry)
        assert registry.pins["io.b3os/github/issue-opened@1"] == "io.b3os/github/issue-opened@1.0.0"
        with pytest.raises(RoutineError) as info:
            load_routine(TRIAGE.replace("event.author", "event.login"), "triage.yaml", registry)
        with pytest.raises(RoutineError) as missing:
            load_routine(TRIAGE.replace("io.b3os/github", "io.b3os/gitlab"), "triage.yaml", registry)
    assert routine.event_triggers[0].inputs == {"team": "ops"}
    assert "the events of io.b3os/github/issue-opened@1 have no field 'login'" in str(info.value)
    assert "cannot resolve io.b3os/gitlab/issue-opened@1: pack io.b3os/gitlab is not in the registry" in str(
        missing.value
    )
