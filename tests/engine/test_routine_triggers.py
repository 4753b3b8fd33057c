# ruff: noqa: E501
"""Routines that start on a pack's trigger (`on: [{trigger: ...}]`): checked against the trigger when
validated, and the event read as `event` in the run's steps and outputs."""

from __future__ import annotations

import textwrap

import pytest
from standin import PACKS, REPO, run_routine
from temporalio.testing import WorkflowEnvironment

from engine.validate import RoutineError, load_routine

HOOKED = """
name: triage
on:
  - trigger: io.b3os/github/issue-opened@1
  - cron: "0 7 * * 1-5"
steps:
  - id: say
    uses: com.example.tools/echo/echo@1
    with:
      text: "#${{ event.number }} ${{ event.title }} by ${{ event.author }}"
outputs:
  title: ${{ event.title }}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(RoutineError) as info:
        load_routine(textwrap.dedent(text).lstrip("\n"), "r.yaml", PACKS)
    return [line.removeprefix("r.yaml:") for line in info.value.lines()]


def test_a_routine_on_a_trigger_and_a_schedule_loads_both() -> None:
    routine = load_routine(HOOKED.lstrip("\n"), "r.yaml", PACKS)
    assert [t.trigger for t in routine.event_triggers] == ["io.b3os/github/issue-opened@1"]
    assert [s.cron for s in routine.schedules] == ["0 7 * * 1-5"]


def test_an_event_field_the_trigger_does_not_have_is_refused_at_its_line() -> None:
    found = problems(HOOKED.replace("event.author", "event.login"))
    assert found == [
        "9:7: step 'say': with: ${{ event.login }}: the events of io.b3os/github/issue-opened@1 have no field "
        "'login' (fields: repository, number, title, body, url, author, labels)"
    ]


def test_event_outside_a_triggered_routine_is_refused() -> None:
    text = HOOKED.replace("  - trigger: io.b3os/github/issue-opened@1\n", "")
    found = problems(text)
    assert any(
        "'event' exists only in a routine started by a trigger (on: [{trigger: ns/pack/key@1}])" in p
        for p in found
    ), found


def test_an_unknown_trigger_and_a_bad_with_are_named() -> None:
    assert problems(HOOKED.replace("issue-opened@1", "issue-closed@1")) == [
        "3:14: on[0]: trigger: cannot resolve io.b3os/github/issue-closed@1: io.b3os/github@1.0.0 has no trigger "
        "'issue-closed' (triggers: issue-opened, issue-created)"
    ]
    with_ = HOOKED.replace("issue-opened@1\n", "issue-opened@1\n    with: {repo: x}\n")
    assert problems(with_) == [
        "4:11: on[0]: with: Additional properties are not allowed ('repo' was unexpected)"
    ]


def test_a_malformed_trigger_ref_and_an_unknown_field_are_named() -> None:
    found = problems(HOOKED.replace("io.b3os/github/issue-opened@1", "GitHub/issue@1\n    wat: 1"))
    assert found == [
        "3:14: on.0.trigger: 'GitHub/issue@1' is not a trigger ref: use ns/pack/trigger@1 or @1.0.0, such as "
        "io.b3os/github/issue-opened@1",
        "4:5: on.0: unknown field 'wat'; the fields of a trigger are trigger, with, connection, inputs",
    ]


async def test_the_event_is_read_in_steps_and_outputs(time_skipping_env: WorkflowEnvironment) -> None:
    event = {"repository": "o/r", "number": 7, "title": "Crash", "url": "u", "author": "ada"}
    run = await run_routine(time_skipping_env.client, HOOKED.lstrip("\n"), run_id="trig-1", event=event)
    assert run.error is None
    assert run.progress.steps["say"].output == {"text": "#7 Crash by ada"}
    assert run.progress.outputs == {"title": "Crash"}


async def test_the_example_notes_an_issue_and_a_run_by_hand_has_an_empty_event(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = (REPO / "examples" / "routines" / "issue-triage.yaml").read_text()
    event = {"repository": "o/r", "number": 3, "title": "Typo", "url": "https://x/3", "author": "bo"}
    hooked = await run_routine(
        time_skipping_env.client, source, {"team": "triage"}, run_id="trig-2", event=event
    )
    assert hooked.error is None, (hooked.error, hooked.progress)
    assert hooked.progress.outputs == {"note": "triage: #3 Typo by bo (https://x/3)"}
    by_hand = await run_routine(time_skipping_env.client, source, run_id="trig-3")
    assert by_hand.statuses == {"note": "skipped"}
    assert by_hand.progress.outputs == {"note": "no event: started by hand"}
