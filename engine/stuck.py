"""The safety net under runs: no run stays stuck on a workflow task, and no worker keeps a slot it lost.

The pacing of engine/pacing.py and the budgets of engine/cel_values.py keep a workflow task's work small
by design; this is for what still gets through (a fault of ours, a machine so busy that a task passes
Temporal's deadlock timeout). Temporal retries a failed workflow task for as long as the run lives: such
a run would read "running" for good, hold its organization's run slot and never answer a cancel. And the
SDK can lose a slot: it interrupts a task that held its thread past 2 s (Python code only: a call in C
cannot be interrupted), then cannot evict the run until that thread is back, and retries the eviction
forever if the run's tasks do not end ("Eviction processed, but N tasks remain").

The worker runs its workflows through `GuardedRunner`, which wraps each workflow instance the sandbox
makes and sees each activation:

- one that raised (a deadlock the worker interrupted), failed its workflow task, or ran past
  `DEADLOCK_S` is reported to `StuckRuns.failed`: that asks Temporal for the run's pending workflow task
  and, from its `STUCK_ATTEMPTS`-th attempt on, terminates the run with a sentence (a run whose task
  failed once, as a busy worker may make it, goes on at its next attempt);
- an activation still running `hung_s` after it began (its thread stuck in C, which the SDK's
  interruption cannot reach) is a slot lost for good: `StuckRuns.watch` terminates the run with a
  sentence and calls `give_up`, and the worker stops (engine.worker: within `SHUTDOWN_S`, then it exits
  regardless) for its supervisor to start it again with every slot free. (The SDK does not wait for such
  a thread before it evicts the run: `asyncio.wait_for` cancelled the future it would wait on. Its
  eviction then fails, "tasks remain", and is retried every 2 s: it succeeds once an interrupted
  thread is back, never while it is stuck.)

The api shows a terminated run as failed, with the termination's reason as its error (`code:
terminated`, api/runs/reads.py). Calls its steps made are charged as usual.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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

HUNG_S = 20.0
"""How long an activation may run before its slot counts as lost (`B3OS_TEMPORAL_HUNG_TASK_S`): ten
times the deadlock timeout, long after the SDK tried to interrupt it."""

WATCH_EVERY_S = 1.0


@dataclass(frozen=True)
class _Activation:
    workflow_id: str
    run_id: str
    began: float


class StuckRuns:
    """Ends the runs whose workflow task keeps failing, and the runs (and worker) that lost a slot.

    `began`, `ended` and `failed` may be called from any thread; the work is done on `loop`, where `watch`
    runs.
    """

    def __init__(
        self,
        client: Client,
        loop: asyncio.AbstractEventLoop,
        give_up: Callable[[str], None],
        *,
        hung_s: float,
    ) -> None:
        self._client = client
        self._loop = loop
        self._give_up = give_up
        self._hung_s = hung_s
        self._lock = threading.Lock()
        self._running: dict[int, _Activation] = {}
        self._tokens = itertools.count()
        self._lost: set[str] = set()
        self._checks: set[asyncio.Task[Any]] = set()

    # --- told by the guarded instances (the workflows' threads) ---------------------------------------

    def began(self, workflow_id: str, run_id: str) -> int:
        """Note an activation that begins; the token to give `ended`."""
        token = next(self._tokens)
        with self._lock:
            self._running[token] = _Activation(workflow_id, run_id, time.monotonic())
        return token

    def ended(self, token: int) -> None:
        with self._lock:
            self._running.pop(token, None)

    def holding(self) -> bool:
        """Whether an activation is running now (its thread holds a workflow task slot)."""
        with self._lock:
            return bool(self._running)

    def failed(self, workflow_id: str, run_id: str, why: str) -> None:
        """Note a failed activation: the run is checked (`check`) on the event loop."""
        self._loop.call_soon_threadsafe(self._spawn, self.check(workflow_id, run_id, why))

    def _spawn(self, work: Any) -> None:
        task = self._loop.create_task(work)
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    # --- on the event loop -----------------------------------------------------------------------------

    async def watch(self) -> None:
        """Forever: every `WATCH_EVERY_S`, an activation running for `hung_s` or more is a lost slot."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            now = time.monotonic()
            with self._lock:
                hung = [a for a in self._running.values() if now - a.began >= self._hung_s]
            for activation in hung:
                why = f"a workflow task of it still ran {now - activation.began:.0f} s after it began"
                await self.end_lost(activation.workflow_id, activation.run_id, why)

    async def check(self, workflow_id: str, run_id: str, why: str) -> bool:
        """End the run when its pending workflow task is at attempt `STUCK_ATTEMPTS` or later; whether it
        was ended."""
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:  # gone, or Temporal unreachable: the next failure asks again
            log.warning("could not read the failing run %s: %s", workflow_id, exc.message)
            return False
        attempt = desc.raw_description.pending_workflow_task.attempt
        if desc.status != WorkflowExecutionStatus.RUNNING or attempt < STUCK_ATTEMPTS:
            return False
        return await self._end(
            workflow_id, run_id, f"its workflow task failed {attempt} times in a row ({_short(why)})"
        )

    async def end_lost(self, workflow_id: str, run_id: str, why: str) -> None:
        """End a run whose workflow task holds a worker slot for good, then give the worker up."""
        if run_id in self._lost:
            return
        self._lost.add(run_id)
        await self._end(workflow_id, run_id, _short(why))
        self._give_up(f"the run {workflow_id} holds a workflow task slot that will not come back ({why})")

    async def _end(self, workflow_id: str, run_id: str, why: str) -> bool:
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        reason = f"the run stopped: {why}, so it was ended; its steps' calls that ran are charged as usual"
        try:
            await handle.terminate(reason=reason)
        except RPCError as exc:  # ended meanwhile, or Temporal unreachable
            log.warning("could not end the stuck run %s: %s", workflow_id, exc.message)
            return False
        log.warning("ended the run %s: %s", workflow_id, why)
        return True


def _short(why: str) -> str:
    return " ".join(why.split())[:300]


class GuardedRunner(WorkflowRunner):
    """A workflow runner (the sandbox's) whose instances tell `runs` how each activation went."""

    def __init__(self, inner: WorkflowRunner, runs: StuckRuns) -> None:
        self._inner = inner
        self._runs = runs

    def prepare_workflow(self, defn: Any) -> None:
        self._inner.prepare_workflow(defn)

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self._inner.set_worker_level_failure_exception_types(types)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Guarded(self._inner.create_instance(det), det.info.workflow_id, self._runs)


class _Guarded(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, workflow_id: str, runs: StuckRuns) -> None:
        self._inner = inner
        self._workflow_id = workflow_id
        self._runs = runs

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        began = time.monotonic()
        token = self._runs.began(self._workflow_id, act.run_id)
        try:
            completion = self._inner.activate(act)
        except BaseException as exc:  # the worker interrupting a deadlocked activation, or a failed eviction
            if not any(job.HasField("remove_from_cache") for job in act.jobs):  # (the SDK retries those)
                first = (str(exc).splitlines() or [""])[0]
                self._runs.failed(
                    self._workflow_id, act.run_id, f"{type(exc).__name__}: {first}".rstrip(": ")
                )
            raise
        finally:
            self._runs.ended(token)
        took = time.monotonic() - began
        if completion.HasField("failed"):
            self._runs.failed(self._workflow_id, act.run_id, completion.failed.failure.message)
        elif took > DEADLOCK_S:
            why = f"it took {took:.1f} s, past the {DEADLOCK_S:g} s allowed"
            self._runs.failed(self._workflow_id, act.run_id, why)
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Any:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:  # what the worker interrupts a deadlocked activation through
        return self._inner.get_thread_id()
