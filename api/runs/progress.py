"""What the workflow cannot say about its own run: a call being retried, and outputs kept out of its result.

The workflow learns of a step's call only when the call ends for good; its retries happen in
Temporal. While a run runs, `note_retries` reads the run's pending activities (from the describe the
runs service makes anyway) into each running step's `retrying`: the attempt running or next, the code,
reason, HTTP status and Retry-After of the attempt before, and the seconds until the next one starts.

A step output too large for the workflow's result (`output_bytes` set, `output` null) is in that
step's activity result in the run's history (for a foreach of more than `FOREACH_CHUNK_ITEMS` items, in
its child workflows' results there, engine.foreach), or, for a step a re-run kept, in the run's input
(`RunRoutineInput.reused`): `fill_outputs` reads it from there once the run has ended, so a finished
run's row and `GET /v1/runs/{id}` hold every output, and a re-run of a re-run keeps them too.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowExecutionDescription, WorkflowHandle
from temporalio.converter import DataConverter

from engine.runs import ForeachChunkResult, RunRoutineInput, RunRoutineResult, StepRetry
from engine.steps import CallActionResult

_STARTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
_COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
_CHUNK_COMPLETED = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED


def note_retries(
    result: RunRoutineResult, desc: WorkflowExecutionDescription, converter: DataConverter, now: dt.datetime
) -> None:
    """Set `retrying` on each running step whose call (or a foreach item's) has failed at least once.

    Args:
        result: The run's progress, changed in place.
        desc: The run's description from Temporal (its pending activities).
        converter: Decodes the last failure's details (the activity's `{"code", "reason", ...}`).
        now: The time the description was read.
    """
    for pending in desc.raw_description.pending_activities:
        if pending.attempt <= 1 or not pending.HasField("last_failure"):
            continue
        step_id, _, index = pending.activity_id.partition("-")
        state = result.steps.get(step_id)
        if state is None or state.status != "running":
            continue
        fields = _failure_fields(pending.last_failure, converter)
        waiting = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        retry_in: float | None = None
        if waiting and pending.HasField("next_attempt_schedule_time"):
            next_at = pending.next_attempt_schedule_time.ToDatetime(tzinfo=dt.UTC)
            retry_in = max(round((next_at - now).total_seconds(), 1), 0.0)
        retry = StepRetry(
            attempt=pending.attempt,
            item=int(index) if index.isdigit() else None,
            code=_text(fields.get("code")) or pending.last_failure.application_failure_info.type or None,
            reason=_text(fields.get("reason")),
            message=_text(fields.get("message")) or pending.last_failure.message or None,
            status=fields.get("status") if isinstance(fields.get("status"), int) else None,
            retry_after=_number(fields.get("retry_after")),
            retry_in_s=retry_in,
        )
        if state.retrying is None or retry.attempt > state.retrying.attempt:
            state.retrying = retry


def _failure_fields(failure: Failure, converter: DataConverter) -> dict[str, Any]:
    """The first detail of an activity's ApplicationError: `{"code", "reason", "message", "status", ...}`."""
    details = failure.application_failure_info.details.payloads
    if not details:
        return {}
    try:
        first = converter.payload_converter.from_payloads(list(details), None)[0]
    except Exception:  # a detail this api cannot read: the failure's own message stands alone
        return {}
    return first if isinstance(first, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


async def fill_outputs(
    result: dict[str, Any], handle: WorkflowHandle[Any, Any], converter: DataConverter
) -> None:
    """Put back, from the run's history, the outputs the workflow left out of its result.

    Args:
        result: A finished run's result as a dict (`RunRoutineResult` dumped), changed in place.
        handle: The run's workflow handle.
        converter: Decodes each activity's `CallActionResult`.
    """
    missing = [
        sid
        for sid, step in (result.get("steps") or {}).items()
        if step.get("output") is None and step.get("output_bytes")
    ]
    if not missing:
        return
    scheduled: dict[int, str] = {}
    outputs: dict[str, Any] = {}  # by activity id: `<step>` or `<step>-<index>`
    decode = converter.payload_converter.from_payloads
    async for event in handle.fetch_history_events():
        if event.event_type == _STARTED:
            payloads = list(event.workflow_execution_started_event_attributes.input.payloads)
            (run_input,) = decode(payloads, [RunRoutineInput])
            outputs.update({sid: kept.output for sid, kept in run_input.reused.items() if sid in missing})
        elif event.event_type == _SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_id
        elif event.event_type == _COMPLETED:
            done = event.activity_task_completed_event_attributes
            activity_id = scheduled.get(done.scheduled_event_id, "")
            if activity_id.partition("-")[0] in missing:
                outputs[activity_id] = decode(list(done.result.payloads), [CallActionResult])[0].output
        elif event.event_type == _CHUNK_COMPLETED:
            payloads = list(event.child_workflow_execution_completed_event_attributes.result.payloads)
            chunk = decode(payloads, [ForeachChunkResult])[0]
            if chunk.step_id in missing:
                for i, item in enumerate(chunk.items):
                    outputs[f"{chunk.step_id}-{chunk.first + i}"] = item.output
    called = [*outputs, *scheduled.values()]  # activity ids, and the items chunks returned
    for sid in missing:
        ids = (a.partition("-") for a in called)
        indices = [int(index) for step, _, index in ids if step == sid and index]
        if sid in outputs:
            result["steps"][sid]["output"] = outputs[sid]
        elif indices:
            result["steps"][sid]["output"] = [outputs.get(f"{sid}-{i}") for i in range(max(indices) + 1)]
