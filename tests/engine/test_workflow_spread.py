"""A busy organization's routine step calls spread over its minute (api.calls.limits, `routine_burst`),
through real parts: the runs API, the Temporal dev server, a worker, the calls API and a node."""

from __future__ import annotations

from realstack import FREE_ECHO, RoutineStack
from test_workflow import STARTED, events, failure_details

from activities.idempotency import step_idempotency_key

ITEMS = 24
"""Four past the organization's 20 starts that go at once."""


async def test_past_20_starts_a_runs_calls_start_half_a_second_apart_each_charged_once(
    routine_stack: RoutineStack,
) -> None:
    org = routine_stack.runner()
    items = ", ".join(str(i) for i in range(ITEMS))
    source = (
        f"name: spread\nsteps:\n  - id: each\n    uses: {FREE_ECHO}\n"
        f"    foreach: [{items}]\n    with: {{text: '${{{{ string(item) }}}}'}}\n"
    )
    run = await routine_stack.run(org, source)

    assert run["status"] == "succeeded", run
    assert [o["text"] for o in run["steps"]["each"]["output"]] == [str(i) for i in range(ITEMS)]
    calls = routine_stack.calls_of(org)  # oldest first
    assert len(calls) == ITEMS  # every item charged once, whatever it was refused before
    keys = {
        routine_stack.stored_keys(org)[step_idempotency_key(run["workflow_id"], "each", i)]
        for i in range(ITEMS)
    }
    assert keys == {c.id for c in calls}
    # the first 20 as the organization's calls at once allow; each later one at least 0.5 s after the one
    # before it (60 s / 120 starts)
    later = [
        (b.started_at - a.started_at).total_seconds() for a, b in zip(calls[19:], calls[20:], strict=False)
    ]
    assert len(later) == ITEMS - 20 and min(later) >= 0.5, later
    # what a held-back item was told (the tests' api answers at once rather than waiting in the api), and
    # its retry sent the item's one key after Retry-After
    told = [
        failure_details(e)
        for e in events(await routine_stack.history(run["workflow_id"]), STARTED)
        if e.activity_task_started_event_attributes.attempt > 1
    ]
    assert told, "no item was held back"
    for detail in told:
        assert (detail["code"], detail["status"], detail["retry_after"]) == ("rate_limited", 429, 1), detail
        assert detail["message"].endswith("its routine steps' calls now start one every 0.5 seconds"), detail
