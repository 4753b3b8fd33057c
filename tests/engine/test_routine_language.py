"""Routines v2 on the real `RoutineWorkflow`: `needs:`, `max-parallel` and the status functions.

Each run uses the workflow itself on Temporal's time-skipping test server, with the stand-in
`call_action` of tests/engine/standin.py; what overlaps, what waits and what runs after a failure or a
cancel is read from the run's Temporal history (the activities' scheduled, completed, failed and
cancelled events), as the Temporal UI's timeline shows it. Validation errors are read at their
file:line:column.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from standin import REFUSED_AS_CANCELLED, Run, run_routine
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from engine.validate import RoutineError, load_routine
from engine.workflow import PATCH_CANCEL_REFUSED, RoutineWorkflow

ECHO = "com.example.tools/echo/echo@1"
FAIL = "com.example.tools/echo/fail@1"


def echo(step_id: str, text: str = "hi", **controls: str) -> str:
    """One echo step as YAML; controls are extra lines such as `needs="[a]"`, `if_="${{ always() }}"`."""
    lines = [f"  - id: {step_id}", f"    uses: {ECHO}"]
    lines += [f"    {key.rstrip('_')}: {value}" for key, value in controls.items()]
    return "\n".join([*lines, f"    with: {{text: '{text}'}}"]) + "\n"


def fail(step_id: str, **controls: str) -> str:
    lines = [f"  - id: {step_id}", f"    uses: {FAIL}"]
    lines += [f"    {key.rstrip('_').replace('_', '-')}: {value}" for key, value in controls.items()]
    return "\n".join([*lines, "    with: {mode: tool_error, code: broken, message: it broke}"]) + "\n"


def sleep(step_id: str, tenths: int, **controls: str) -> str:
    lines = [f"  - id: {step_id}", f"    uses: {FAIL}"]
    lines += [f"    {key.rstrip('_')}: {value}" for key, value in controls.items()]
    return "\n".join([*lines, f"    with: {{mode: sleep, seconds: {tenths}}}"]) + "\n"


def routine(*steps: str, head: str = "", outputs: str = "") -> str:
    return f"name: language\n{head}steps:\n{''.join(steps)}{outputs}"


async def run(env: WorkflowEnvironment, source: str, **options: Any) -> Run:
    return await run_routine(env.client, source, run_id=uuid.uuid4().hex[:12], **options)


def in_flight_at_most(run: Run) -> int:
    """The most activities scheduled and not yet ended at any point of the history."""
    now = most = 0
    for what, _ in run.timeline():
        now += 1 if what == "scheduled" else -1
        most = max(most, now)
    return most


def problems(source: str) -> list[str]:
    with pytest.raises(RoutineError) as caught:
        load_routine(source, "r.yaml")
    return caught.value.lines()


# --- needs and max-parallel -----------------------------------------------------------------------


async def test_steps_that_do_not_need_each_other_run_at_once_and_a_join_waits_for_both(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        echo("a", "from a"),
        echo("b", "from b", needs="[]"),
        echo("join", "${{ steps.a.output.text }} and ${{ steps.b.output.text }}", needs="[a, b]"),
        outputs="outputs:\n  joined: ${{ steps.join.output.text }}\n",
    )
    done = await run(time_skipping_env, source)
    assert done.error is None and done.progress.outputs == {"joined": "from a and from b"}
    timeline = done.timeline()
    # both parallel steps were scheduled before either completed: concurrent activities
    assert timeline[:2] == [("scheduled", "a"), ("scheduled", "b")]
    assert timeline.index(("scheduled", "join")) > max(
        timeline.index(("completed", "a")), timeline.index(("completed", "b"))
    )


async def test_max_parallel_bounds_the_steps_that_run_at_once(time_skipping_env: WorkflowEnvironment) -> None:
    steps = [echo(f"s{i}", f"{i}", needs="[]") for i in range(6)]
    bounded = await run(time_skipping_env, routine(*steps, head="max-parallel: 2\n"))
    assert bounded.error is None and set(bounded.statuses.values()) == {"succeeded"}
    assert in_flight_at_most(bounded) == 2
    # started in file order as slots free up
    assert [a for what, a in bounded.timeline() if what == "scheduled"] == [f"s{i}" for i in range(6)]
    default = await run(time_skipping_env, routine(*steps))
    assert in_flight_at_most(default) == 4  # max-parallel's default


async def test_a_step_without_needs_waits_for_the_step_before_it_only(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        sleep("slow", 5),
        echo("quick", needs="[]"),
        echo("after_quick"),  # waits for quick, not for slow
        echo("last", needs="[slow, after_quick]"),
    )
    done = await run(time_skipping_env, source)
    timeline = done.timeline()
    assert done.error is None
    assert timeline.index(("completed", "after_quick")) < timeline.index(("completed", "slow"))
    assert timeline.index(("scheduled", "after_quick")) > timeline.index(("completed", "quick"))
    assert timeline.index(("scheduled", "last")) > timeline.index(("completed", "slow"))


async def test_a_routine_without_needs_runs_its_steps_one_after_another(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    done = await run(time_skipping_env, routine(echo("a"), echo("b"), echo("c")))
    assert [step for _, step in done.timeline()] == ["a", "a", "b", "b", "c", "c"]


async def test_progress_shows_waiting_steps_as_pending(time_skipping_env: WorkflowEnvironment) -> None:
    source = routine(echo("quick"), sleep("slow", 5), echo("after", needs="[slow]"))
    done = await run(time_skipping_env, source, sleeping="slow")
    assert done.midway is not None
    assert {sid: s.status for sid, s in done.midway.steps.items()} == {
        "slow": "running",
        "quick": "succeeded",
        "after": "pending",
    }
    assert done.midway.status == "running"
    assert done.statuses == {"slow": "succeeded", "quick": "succeeded", "after": "succeeded"}


# --- status functions ------------------------------------------------------------------------------


async def test_after_a_failure_later_steps_are_skipped_unless_their_if_asks_for_it(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        echo("first"),
        fail("broken"),
        echo("next"),  # success(): skipped
        echo("next_if", if_="inputs.go"),  # success() && inputs.go: skipped, its if: not evaluated
        echo("on_failure", "failure seen", if_="${{ failure() }}"),
        echo("cleanup", "cleaned", if_="${{ always() }}"),
        echo("not_cancelled", if_="${{ !cancelled() }}"),
        echo("apart", needs="[]"),  # does not need the failed step: runs
        echo("after_apart", "${{ steps.apart.status }}", needs="[apart]", if_="${{ success() }}"),
        head="inputs:\n  go: {type: boolean, default: true}\n",
    )
    done = await run(time_skipping_env, source)
    assert done.statuses == {
        "first": "succeeded",
        "broken": "failed",
        "next": "skipped",
        "next_if": "skipped",
        "on_failure": "succeeded",
        "cleanup": "succeeded",
        "not_cancelled": "succeeded",
        "apart": "succeeded",
        "after_apart": "succeeded",
    }
    # the run still fails, with the failed step's sentence
    assert isinstance(done.error, ApplicationError) and done.error.type == "StepFailed"
    assert done.error.message == (
        "step broken failed: tool_failed (tool_error): the tool answered with its error broken: it broke"
    )
    assert done.progress.status == "failed"
    assert done.error.details[0]["step"] == "broken"
    assert done.error.details[1]["steps"]["cleanup"]["output"] == {"text": "cleaned"}


async def test_a_failure_with_continue_on_error_counts_as_a_success(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        fail("flaky", continue_on_error="true"),
        echo("next", "${{ steps.flaky.status }}"),
        echo("on_failure", if_="${{ failure() }}"),
        outputs="outputs:\n  next: ${{ steps.next.output.text }}\n",
    )
    done = await run(time_skipping_env, source)
    assert done.error is None and done.progress.outputs == {"next": "failed"}
    assert done.statuses == {"flaky": "failed", "next": "succeeded", "on_failure": "skipped"}


async def test_failure_reads_the_steps_needed_through_others_only(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        fail("broken"),
        echo("apart", needs="[]"),
        echo("sees_it", needs="[apart, broken]", if_="${{ failure() }}"),
        echo("does_not", needs="[apart]", if_="${{ failure() }}"),
        echo("through", needs="[sees_it]", if_="${{ failure() }}"),  # broken, through sees_it
    )
    done = await run(time_skipping_env, source)
    assert done.statuses == {
        "broken": "failed",
        "apart": "succeeded",
        "sees_it": "succeeded",
        "does_not": "skipped",
        "through": "succeeded",
    }


async def test_a_cancelled_run_runs_its_always_and_cancelled_steps_then_ends_cancelled(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    source = routine(
        sleep("slow", 100),
        echo("never"),
        echo("cleanup", "cleaned after ${{ steps.slow.status }}", needs="[slow]", if_="${{ always() }}"),
        echo("report", "cancelled", needs="[cleanup]", if_="${{ cancelled() }}"),
        echo("on_success", needs="[slow]", if_="${{ success() || failure() }}"),
    )
    done = await run(time_skipping_env, source, cancel_when_sleeping="slow")
    assert isinstance(done.error, CancelledError)
    assert done.progress.status == "cancelled"
    assert done.statuses == {
        "slow": "cancelled",
        "never": "skipped",
        "cleanup": "succeeded",
        "report": "succeeded",
        "on_success": "skipped",
    }
    assert done.progress.steps["cleanup"].output == {"text": "cleaned after cancelled"}
    timeline = done.timeline()
    assert timeline.index(("scheduled", "cleanup")) > timeline.index(("cancelled", "slow"))
    assert done.events(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)


async def test_a_step_the_api_refused_because_the_run_was_cancelled_is_cancelled_not_failed(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    # the cancel reached the api before the workflow heard of it: the step's call is refused run_cancelled
    done = await run(
        time_skipping_env,
        routine(
            echo("cut", REFUSED_AS_CANCELLED),
            echo("after", if_="${{ failure() }}", needs="[cut]"),
            # a cleanup step refused so: its own time after the cancel had passed, which is its failure
            echo("late", REFUSED_AS_CANCELLED, if_="${{ always() }}", needs="[cut]"),
        ),
    )
    assert done.statuses == {"cut": "cancelled", "after": "skipped", "late": "failed"}
    assert done.progress.steps["cut"].error is None
    late = done.progress.steps["late"].error
    assert late is not None and (late.code, late.reason) == ("forbidden", "run_cancelled")
    marker = EventType.EVENT_TYPE_MARKER_RECORDED
    assert any(
        PATCH_CANCEL_REFUSED.encode() in e.marker_recorded_event_attributes.SerializeToString()
        for e in done.events(marker)
    )
    await Replayer(workflows=[RoutineWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        done.history
    )


async def test_without_a_cancel_cancelled_is_false(time_skipping_env: WorkflowEnvironment) -> None:
    done = await run(time_skipping_env, routine(echo("a"), echo("b", if_="${{ cancelled() }}")))
    assert done.error is None and done.statuses == {"a": "succeeded", "b": "skipped"}


async def test_the_cleanup_example_reports_the_failure_and_closes_the_session(
    time_skipping_env: WorkflowEnvironment, repo_root: Any
) -> None:
    source = (repo_root / "examples" / "routines" / "cleanup.yaml").read_text()
    done = await run(time_skipping_env, source, inputs={"fail": True})
    assert done.statuses == {
        "open": "succeeded",
        "work": "succeeded",
        "check": "failed",
        "report": "succeeded",
        "close": "succeeded",
    }
    assert done.progress.steps["close"].output == {"text": "closed (check: failed)"}
    assert isinstance(done.error, ApplicationError) and done.error.message.startswith("step check failed")
    quiet = await run(time_skipping_env, source)
    assert quiet.error is None and quiet.statuses["report"] == "skipped"
    assert quiet.progress.outputs == {"check": "skipped", "closed": "closed (check: skipped)"}


async def test_the_fan_in_example_runs_its_first_two_steps_side_by_side(
    time_skipping_env: WorkflowEnvironment, repo_root: Any
) -> None:
    source = (repo_root / "examples" / "routines" / "fan-in.yaml").read_text()
    done = await run(time_skipping_env, source)
    assert done.error is None and done.progress.outputs == {"line": "hello world, from Berlin", "found": 1}
    assert done.timeline()[:2] == [("scheduled", "search"), ("scheduled", "greet")]


# --- validation ------------------------------------------------------------------------------------


def test_needs_name_other_known_steps_once() -> None:
    found = problems(
        routine(
            echo("a"),
            echo("b", needs="[a, a, b, nope]"),
        )
    )
    assert found == [
        "r.yaml:8:16: step 'b': needs: 'a' is named twice",
        "r.yaml:8:19: step 'b': needs: a step cannot need itself",
        "r.yaml:8:22: step 'b': needs: no step 'nope' (steps: a, b)",
    ]


def test_a_cycle_of_needs_is_refused_where_it_starts() -> None:
    found = problems(routine(echo("a", needs="[c]"), echo("b", needs="[a]"), echo("c", needs="[b]")))
    assert found == [
        "r.yaml:5:13: step 'a': needs: a -> c -> b -> a is a cycle: each of these steps waits for the next, "
        "so none of them could start"
    ]


def test_a_step_reads_only_the_steps_it_needs_directly_or_through_others() -> None:
    found = problems(
        routine(
            echo("a"),
            echo("b", needs="[]"),
            echo("c", "${{ steps.b.output.text }} ${{ steps.a.output.text }}"),  # waits for b only
            echo("d", "${{ steps.a.output.text }}", needs="[c]"),
            echo("e", "${{ steps.b.status }}", needs="[d]"),  # b through d and c: fine
        )
    )
    assert found == [
        "r.yaml:12:50: step 'c': with: ${{ steps.a.output.text }}: steps.a is not among the steps this "
        "step waits for (the step before it, and what that one waits for): list a in its needs:",
        "r.yaml:16:23: step 'd': with: ${{ steps.a.output.text }}: steps.a is not among the steps this "
        "step needs, directly or through others: add a to its needs:",
    ]


def test_outputs_read_any_step() -> None:
    load_routine(
        routine(echo("a"), echo("b", needs="[]"), outputs="outputs:\n  x: ${{ [steps.a, steps.b] }}\n")
    )


def test_status_functions_are_allowed_only_in_if_and_without_arguments() -> None:
    found = problems(
        routine(
            echo("a", "${{ success() }}"),
            echo("b", if_="${{ failure(1) || always() }}"),
            outputs="outputs:\n  x: ${{ cancelled() }}\n",
        )
    )
    assert found == [
        "r.yaml:5:23: step 'a': with: ${{ success() }}: success() is a status function: it may be called "
        "only in if:",
        "r.yaml:8:13: step 'b': if: ${{ failure(1) || always() }}: failure() takes no arguments: call it as "
        "failure()",
        "r.yaml:11:10: outputs: ${{ cancelled() }}: cancelled() is a status function: it may be called only "
        "in if:",
    ]


@pytest.mark.parametrize("value", ["0", "33", "'2'"])
def test_max_parallel_is_a_whole_number_from_1_to_32(value: str) -> None:
    (found,) = problems(routine(echo("a"), head=f"max-parallel: {value}\n"))
    assert found.startswith("r.yaml:2:15: max-parallel: ")
