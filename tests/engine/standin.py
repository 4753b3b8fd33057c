"""The stand-in `call_action` activity of the routine tests that run the real `RoutineWorkflow` on
Temporal's time-skipping test server (tests/engine/test_examples.py, test_routine_language.py, and
the history recorder tests/engine/record_histories.py).

It sits at the one seam that cannot run here without the stack: it takes and returns the real
activity's models, checks each call's input against the action's inputSchema as the api does, and
answers like the echo tool (and like the Open-Meteo place search for `search-places`, the GitHub pack's
JS action for `list-open-issues`); failures go
through the real activity's error mapping and its max-attempts ledger. The echo pack's `fail` action
with `mode: sleep` sleeps `seconds` tenths of a second, heartbeating, so a run can be cancelled
while a step runs (a tenth, so that tests stay quick). The real tool, HTTP action and api run in the
stack tests (tests/engine/test_workflow*.py).
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from workers import PATIENCE_S

from activities.call_action import Ledger
from activities.errors import error_for_answer
from engine.foreach import ForeachWorkflow
from engine.resolvers import LocalPackResolver
from engine.run_inputs import resolve_inputs
from engine.runs import RunRoutineInput, RunRoutineResult, StepResult, routine_workflow_id
from engine.steps import CallActionInput, CallActionResult
from engine.validate import load_routine
from engine.workflow import RoutineWorkflow
from node.runner import content_type_of

REPO = Path(__file__).resolve().parents[2]
ECHO_DIR = REPO / "examples" / "tools" / "echo"
PACK_DIRS = [ECHO_DIR, *sorted(p for p in (REPO / "examples" / "packs").iterdir() if p.is_dir())]
PACKS = LocalPackResolver(PACK_DIRS)
PLACES = [{"name": "Berlin", "latitude": 52.52, "longitude": 13.41, "timezone": "Europe/Berlin"}]

REFUSED_AS_CANCELLED = "answer as the api does once the run was cancelled"
"""An echo of this text is answered `403 forbidden (run_cancelled)`, as the api answers a step's call made
after its run was cancelled (before the workflow heard of the cancel)."""

SLEEPING: set[str] = set()
"""The steps (`<step id>` or `<step id>-<index>`) whose `fail` sleep is running now, in this process."""


def _tool_failed(reason: str, message: str, attempt: int, **details: Any) -> Exception:
    """What the activity raises when the api answers a failed tool call (502 tool_failed)."""
    body = {"error": {"code": "tool_failed", "reason": reason, "message": message, **details}}
    return error_for_answer(502, body, None, attempt=attempt)


@activity.defn(name="call_action")
async def call_action(input: CallActionInput) -> CallActionResult:
    """The step activity's stand-in: the echo tool's and the Open-Meteo place search's answers, its
    failures counted against the step's max-attempts by the real activity's ledger."""
    info = activity.info()
    ledger = Ledger.of(info.heartbeat_details, info.attempt)
    try:
        return await _answer(input)
    except ApplicationError as exc:
        raise ledger.close(exc, input.max_attempts) from None


async def wait_sleeping(label: str, timeout_s: float = PATIENCE_S) -> None:
    """Return once the `fail` sleep of this step (`id` or `id-index`) runs in this process."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while label not in SLEEPING:
        if loop.time() > deadline:
            raise TimeoutError(f"step {label} did not start sleeping within {timeout_s} s")
        await asyncio.sleep(0.01)


async def _sleep(input: CallActionInput, seconds: int) -> None:
    label = input.step_id if input.index is None else f"{input.step_id}-{input.index}"
    SLEEPING.add(label)
    try:
        for _ in range(seconds * 10):
            activity.heartbeat()
            await asyncio.sleep(0.01)
    finally:
        SLEEPING.discard(label)


async def _answer(input: CallActionInput) -> CallActionResult:
    attempt = activity.info().attempt
    schema = PACKS.input_schema(input.ref)
    if schema is None:
        body = {"error": {"code": "not_found", "message": f"{input.ref} is not in the example packs"}}
        raise error_for_answer(404, body, None, attempt=attempt)
    try:
        jsonschema.Draft202012Validator(schema).validate(input.input)
    except jsonschema.ValidationError as exc:
        body = {"error": {"code": "invalid_request", "message": f"input: {exc.message}"}}
        raise error_for_answer(400, body, None, attempt=attempt) from None
    action = input.ref.split("/")[2].split("@")[0]
    ask = input.input
    if action == "search-places":
        return CallActionResult(output={"places": PLACES if ask["name"] == "Berlin" else []}, attempt=attempt)
    if action == "list-open-issues":
        issues = [{"number": 7, "title": "a bug", "url": "https://github.com/o/r/issues/7", "author": "ann"}]
        return CallActionResult(
            output={"count": 1, "issues": issues, "pages": 1, "truncated": False}, attempt=attempt
        )
    if action == "noop":
        return CallActionResult(output={}, attempt=attempt)
    if action == "fail" and ask["mode"] == "sleep":
        await _sleep(input, ask.get("seconds", 1))
        return CallActionResult(output={"slept": ask.get("seconds", 1)}, attempt=attempt)
    if action == "fail" and ask["mode"] == "tool_error":
        code, message = ask.get("code", "failed"), ask.get("message", "failed on purpose")
        raise _tool_failed(
            "tool_error",
            f"the tool answered with its error {code}: {message}",
            attempt,
            tool_code=code,
            tool_message=message,
            retryable=ask.get("retryable", False),
        )
    if action == "fail" and ask["mode"] == "exit":
        status = ask.get("exitCode", 1)
        raise _tool_failed("exit", f"the tool exited with status {status}", attempt, exit_code=status)
    assert action == "echo", f"the stand-in does not answer {input.ref} {ask}"
    if ask["text"] == REFUSED_AS_CANCELLED:  # what the api answers a call of a run it has cancelled
        message = (
            "Run x was cancelled: its steps start no new call, but for the steps whose if: calls always()"
        )
        body = {"error": {"code": "forbidden", "reason": "run_cancelled", "message": message}}
        raise error_for_answer(403, body, None, attempt=attempt)
    output: dict[str, Any] = {"text": ask["text"]}
    if "file" in ask:
        name = ask["file"]["name"]
        data = base64.b64decode(ask["file"]["$bytes"])
        output["file"] = {
            "$bytes": ask["file"]["$bytes"],
            "name": name,
            "bytes": len(data),
            "contentType": content_type_of(name),
        }
    return CallActionResult(output=output, attempt=attempt)


@dataclass
class Run:
    """One run of a routine on the stand-in: its progress at the end, its failure, its history."""

    progress: RunRoutineResult
    error: BaseException | None  # the cause of the WorkflowFailureError (a failed or cancelled run)
    history: WorkflowHistory
    midway: RunRoutineResult | None = None  # the progress while the step `sleeping` slept

    @property
    def statuses(self) -> dict[str, str]:
        """Each step's status."""
        return {sid: step.status for sid, step in self.progress.steps.items()}

    def events(self, kind: EventType.ValueType) -> list[HistoryEvent]:
        """The history's events of one kind."""
        return [e for e in self.history.events if e.event_type == kind]

    def scheduled(self) -> dict[int, str]:
        """Each ActivityTaskScheduled event's id, and its activity id (`<step>` or `<step>-<i>`)."""
        kind = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        return {e.event_id: e.activity_task_scheduled_event_attributes.activity_id for e in self.events(kind)}

    def timeline(self) -> list[tuple[str, str]]:
        """The activities' lives in history order: (what, activity id), what being scheduled, completed,
        failed or cancelled."""
        ids = self.scheduled()
        kinds = {
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("completed", "activity_task_completed"),
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", "activity_task_failed"),
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ("cancelled", "activity_task_canceled"),
        }
        found: list[tuple[str, str]] = []
        for event in self.history.events:
            if event.event_id in ids:
                found.append(("scheduled", ids[event.event_id]))
            elif event.event_type in kinds:
                what, field = kinds[event.event_type]
                attributes = getattr(event, f"{field}_event_attributes")
                found.append((what, ids[attributes.scheduled_event_id]))
        return found


async def run_routine(
    client: Client,
    source: str,
    inputs: dict[str, Any] | None = None,
    *,
    run_id: str,
    cancel_when_sleeping: str | None = None,
    sleeping: str | None = None,
    reused: dict[str, Any] | None = None,
    event: dict[str, Any] | None = None,
) -> Run:
    """Validate a routine and run it to its end on the real workflow, with this stand-in, on a worker
    of its own. Once the step `sleeping` sleeps, its progress is read (`Run.midway`); once the step
    `cancel_when_sleeping` sleeps, the run is cancelled. `reused` is a re-run's kept steps (step id ->
    StepResult as a dict)."""
    routine = load_routine(source, f"{run_id}.yaml")
    queue = f"standin-{run_id}"
    async with Worker(
        client, task_queue=queue, workflows=[RoutineWorkflow, ForeachWorkflow], activities=[call_action]
    ):
        handle = await client.start_workflow(
            RoutineWorkflow.run,
            RunRoutineInput(
                routine=routine,
                inputs=resolve_inputs(routine, inputs or {}),
                org_id="org_standin",
                key_id="key_standin",
                run_id=run_id,
                reused={k: StepResult.model_validate(v) for k, v in (reused or {}).items()},
                event=event,
            ),
            id=routine_workflow_id(routine.name, run_id),
            task_queue=queue,
        )
        midway = None
        if sleeping:
            await wait_sleeping(sleeping)
            midway = await handle.query("progress", result_type=RunRoutineResult)
        if cancel_when_sleeping:
            await wait_sleeping(cancel_when_sleeping)
            await handle.cancel()
        error: BaseException | None = None
        try:
            await handle.result()
        except WorkflowFailureError as exc:
            error = exc.cause
        progress = await handle.query("progress", result_type=RunRoutineResult)
        return Run(progress, error, await handle.fetch_history(), midway)
