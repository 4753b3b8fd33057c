"""The safety net under runs: a run whose workflow task keeps failing is ended with a sentence.

Temporal retries a failed workflow task for as long as the run lives: a run whose workflow code fails its
task (Temporal's deadlock detection, 2 s without yielding, or a fault of ours) would stay "running" for
good, hold its organization's run slot, and never answer a cancel. The pacing of engine/pacing.py and the
budgets of engine/cel_runtime.py keep a task's work small by design; this is for what still gets through.

The worker runs its workflows through `GuardedRunner`, which wraps each workflow instance the sandbox
makes and sees each activation end: one that raised (a deadlock the worker interrupted), failed its
workflow task, or ran past `DEADLOCK_S` is reported to `StuckRuns`. That asks Temporal for the run's
pending workflow task, and from its `STUCK_ATTEMPTS`-th attempt on (Temporal schedules the next attempt
of a failed task at once: a spinning task was ended ~6 s after its run started) terminates the run with
a sentence; the api shows a terminated run as failed, with
that sentence as its error (api/runs/reads.py). A run whose task failed once, as a worker busy past
the deadlock timeout may make it, goes on at its next attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

log = logging.getLogger(__name__)

STUCK_ATTEMPTS = 2
"""The attempt of a run's workflow task whose failure ends the run."""

DEADLOCK_S = 2.0
"""Temporal's deadlock timeout: an activation running longer has failed its workflow task."""

Report = Callable[[str, str, str], None]
"""Called (from the workflow's thread) with a run's workflow id, run id and why its activation failed."""


class GuardedRunner(WorkflowRunner):
    """A workflow runner (the sandbox's) whose instances report the activations that fail to `report`."""

    def __init__(self, inner: WorkflowRunner, report: Report) -> None:
        self._inner = inner
        self._report = report

    def prepare_workflow(self, defn: Any) -> None:
        self._inner.prepare_workflow(defn)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self._inner.set_worker_level_failure_exception_types(types)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Guarded(self._inner.create_instance(det), det.info.workflow_id, self._report)


class _Guarded(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, workflow_id: str, report: Report) -> None:
        self._inner = inner
        self._workflow_id = workflow_id
        self._report = report

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        started = time.monotonic()
        try:
            completion = self._inner.activate(act)
        except BaseException as exc:  # the worker interrupting a deadlocked activation
            self._report(self._workflow_id, act.run_id, f"it was stopped: {type(exc).__name__}")
            raise
        took = time.monotonic() - started
        if completion.HasField("failed"):
            self._report(self._workflow_id, act.run_id, completion.failed.failure.message)
        elif took > DEADLOCK_S:
            why = f"it took {took:.1f} s, past the {DEADLOCK_S:g} s allowed"
            self._report(self._workflow_id, act.run_id, why)
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:  # what the worker interrupts a deadlocked activation through
        return self._inner.get_thread_id()


class StuckRuns:
    """Ends the runs whose workflow task failed `STUCK_ATTEMPTS` times (on the worker's event loop)."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop
        self._checks: set[asyncio.Task[bool]] = set()

    def report(self, workflow_id: str, run_id: str, why: str) -> None:
        """Note a failed activation (from any thread): the run is checked on the event loop."""
        self._loop.call_soon_threadsafe(self._start_check, workflow_id, run_id, why)

    def _start_check(self, workflow_id: str, run_id: str, why: str) -> None:
        task = self._loop.create_task(self.check(workflow_id, run_id, why))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def check(self, workflow_id: str, run_id: str, why: str) -> bool:
        """End the run when its pending workflow task is at attempt `STUCK_ATTEMPTS` or later; whether it
        was ended."""
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            desc = await handle.describe()
            attempt = desc.raw_description.pending_workflow_task.attempt
            if desc.status != WorkflowExecutionStatus.RUNNING or attempt < STUCK_ATTEMPTS:
                return False
            why = " ".join(why.split())[:500]
            await handle.terminate(
                reason=f"the run stopped: its workflow task failed {attempt} times in a row ({why}), so it "
                "was ended; its steps' calls that ran are charged as usual"
            )
        except RPCError as exc:  # gone, ended meanwhile, or Temporal unreachable: the next failure asks again
            log.warning("could not end the stuck run %s: %s", workflow_id, exc.message)
            return False
        log.warning("ended the run %s: its workflow task failed %d times (%s)", workflow_id, attempt, why)
        return True
