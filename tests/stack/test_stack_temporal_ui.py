"""The Temporal UI as an operator meets it, in headless Chromium against `b3os dev`'s Temporal UI: a failed
run's page shows the run's sentence and no stack trace with the server's files, its timeline names each
step's call by the step's `name:` (or its id), the Schedules list names each schedule's routine, and a poll
trigger's subscription shows as its Schedule and its `trigger-poll` workflows.

Each page is screenshot (`<page>.png`) and its DOM dumped (`<page>.html`) under the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import loopback
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from engine.polls import POLL_WORKFLOW_TYPE
from engine.polls import poll_schedule_id as poll_schedule_id_of

from .stacktest import REPO, Dev, running_dev
from .stacktest import b3os_process as _b3os

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WINDOW = "1600,2400"
"""Tall enough that the timeline is on screen: the UI draws its rows only when they are in view."""

ROUTINE = """\
name: ui-check
steps:
  - id: hello
    name: Say hello
    uses: com.example.tools/echo/echo@1
    with: {text: hi}
  - id: boom
    uses: com.example.tools/echo/fail@1
    with: {mode: tool_error, code: no_luck, message: the tool failed as asked}
"""
SENTENCE = (
    "step boom failed: tool_failed (tool_error): the tool answered with its error no_luck: "
    "the tool failed as asked"
)
SERVER_PATHS = (str(REPO), "/work/", "site-packages", '.py"', '.py\\"')
"""What a Python stack trace of the server shows: its files (in the page, as text or JSON)."""


@dataclass
class FailedRun:
    dev: Dev
    ui: str
    workflow_id: str
    temporal_run_id: str
    schedule_id: str
    poll_schedule_id: str
    subscription_id: str


@pytest.fixture(scope="module")
def failed_run() -> Iterator[FailedRun]:
    with running_dev("b3os-ui-") as dev:
        (dev.root / "ui-check.yaml").write_text(ROUTINE)
        ran = _b3os(dev.root, dev.env, "routine", "run", "ui-check.yaml", "--json")
        assert ran.returncode == 1, (ran.stdout, ran.stderr)
        run_id = json.loads(ran.stdout)["run_id"]
        key = dev.dev_env["B3OS_API_KEY"]
        run = loopback.get(
            f"{dev.api_url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {key}"}
        ).json()
        made = _b3os(dev.root, dev.env, "routine", "schedule", "ui-check", "--cron", "0 0 1 1 *")
        assert made.returncode == 0, made.stderr
        schedule_id = made.stdout.split()[1]
        # the example poll routine, stored by running it by hand: its subscription's Schedule, polled once now
        shutil.copy(REPO / "examples" / "routines" / "watch-issues.yaml", dev.root / "watch-issues.yaml")
        watched = _b3os(dev.root, dev.env, "routine", "run", "watch-issues.yaml")
        assert watched.returncode == 0, (watched.stdout, watched.stderr)
        (sub,) = loopback.get(
            f"{dev.api_url}/v1/triggers/subscriptions", headers={"Authorization": f"Bearer {key}"}
        ).json()["subscriptions"]
        poll_schedule_id = poll_schedule_id_of(sub["id"], "watch-issues")
        ui = f"http://127.0.0.1:{dev.ports['--ui-port']}"
        temporal_run_id = asyncio.run(_temporal_run_id(dev, run["workflow_id"], poll_schedule_id, sub["id"]))
        yield FailedRun(
            dev, ui, run["workflow_id"], temporal_run_id, schedule_id, poll_schedule_id, sub["id"]
        )


async def _temporal_run_id(dev: Dev, workflow_id: str, poll_schedule_id: str, subscription_id: str) -> str:
    """The failed run's Temporal run id, once the poll Schedule has started a poll (triggered now)."""
    client = await Client.connect(dev.dev_env["B3OS_TEMPORAL_ADDRESS"])
    await client.get_schedule_handle(poll_schedule_id).trigger()
    query = (
        f"WorkflowType = '{POLL_WORKFLOW_TYPE}' AND WorkflowId STARTS_WITH 'trigger-poll-{subscription_id}'"
    )
    deadline = time.monotonic() + 60
    while not (await client.count_workflows(query)).count:  # visibility is eventually consistent
        assert time.monotonic() < deadline, f"no {POLL_WORKFLOW_TYPE} workflow of {poll_schedule_id}"
        await asyncio.sleep(0.2)
    return (await client.get_workflow_handle(workflow_id).describe()).run_id


def _page(url: str, where: Path, name: str) -> str:
    """Load `url` in headless Chromium (no host but 127.0.0.1 resolvable): screenshot it to `<name>.png`,
    dump its DOM to `<name>.html`; the DOM's text, without tags."""
    profile = where / "profile"
    common = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=20000",
        f"--window-size={WINDOW}", "--hide-scrollbars",
    ]  # fmt: skip
    shot = subprocess.run(
        [*common, f"--screenshot={where / f'{name}.png'}", url], capture_output=True, timeout=90
    )
    assert shot.returncode == 0 and (where / f"{name}.png").stat().st_size > 0, shot.stderr[-3000:]
    dumped = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    (where / f"{name}.html").write_text(dumped.stdout)
    return re.sub(
        r"\s+",
        " ",
        re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", "", dumped.stdout, flags=re.S)),
    )


def test_a_failed_runs_page_shows_its_sentence_and_no_server_path(
    failed_run: FailedRun, tmp_path: Path
) -> None:
    text = _page(f"{failed_run.ui}/namespaces/default/workflows/{failed_run.workflow_id}", tmp_path, "run")
    assert "Failed" in text and SENTENCE in text, text[-3000:]
    history = _page(
        f"{failed_run.ui}/namespaces/default/workflows/{failed_run.workflow_id}/{failed_run.temporal_run_id}/history",
        tmp_path,
        "history",
    )
    assert "Activity Task Failed" in history and "no_luck: the tool failed as asked" in history
    for page in (text, history):
        assert not [p for p in SERVER_PATHS if p in page], [p for p in SERVER_PATHS if p in page]


async def test_the_runs_failures_carry_no_stack_trace(failed_run: FailedRun) -> None:
    client = await Client.connect(failed_run.dev.dev_env["B3OS_TEMPORAL_ADDRESS"])
    history = await client.get_workflow_handle(failed_run.workflow_id).fetch_history()
    failures = {
        event.event_type: (
            event.activity_task_failed_event_attributes.failure
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            else event.workflow_execution_failed_event_attributes.failure
        )
        for event in history.events
        if event.event_type
        in (EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
    }
    assert len(failures) == 2
    assert failures[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED].message == SENTENCE
    assert [f.stack_trace for f in failures.values()] == ["", ""]


def test_the_timeline_names_each_steps_call_by_its_name_or_id(failed_run: FailedRun, tmp_path: Path) -> None:
    text = _page(
        f"{failed_run.ui}/namespaces/default/workflows/{failed_run.workflow_id}", tmp_path, "timeline"
    )
    assert "call_action • Say hello (hello) · com.example.tools/echo/echo@1.0.0" in text, text[-3000:]
    assert "call_action • boom · com.example.tools/echo/fail@1.0.0" in text


def test_the_schedules_list_names_the_routine(failed_run: FailedRun, tmp_path: Path) -> None:
    text = _page(f"{failed_run.ui}/namespaces/default/schedules", tmp_path, "schedules")
    assert f"routine-schedule-ui-check-{failed_run.schedule_id}" in text, text[-3000:]


def test_a_poll_triggers_schedule_and_its_polls_show_in_the_ui(failed_run: FailedRun, tmp_path: Path) -> None:
    schedules = _page(f"{failed_run.ui}/namespaces/default/schedules", tmp_path, "poll-schedules")
    assert failed_run.poll_schedule_id in schedules, schedules[-3000:]
    query = quote(f'WorkflowType="{POLL_WORKFLOW_TYPE}"')
    polls = _page(f"{failed_run.ui}/namespaces/default/workflows?query={query}", tmp_path, "polls")
    assert f"trigger-poll-{failed_run.subscription_id}-" in polls and POLL_WORKFLOW_TYPE in polls, polls[
        -3000:
    ]
