"""`client.runs`: read, wait for, cancel, re-run and list routine runs.

A run is `{"run_id", "routine", "status", "inputs", "outputs", "steps": {id: {"status", "attempts", "ref",
"output" | "error"}}, "error", "workflow_id", ...}`; `status` is `running`, `succeeded`, `failed` or
`cancelled`, and a step's is `pending`, `running`, `succeeded`, `failed` or `skipped`.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import time
from collections.abc import Callable
from typing import Any

from b3os import _endpoints as endpoints
from b3os.actions import AsyncSend, Send
from b3os.errors import WaitTimedOut

OnStep = Callable[[str, dict[str, Any]], Any]
"""Called as `on_step(step_id, step)` once for each step when it has finished (or was skipped)."""
DEFAULT_POLL_S = 1.0
MAX_WAIT_S = 60.0
"""The longest one read of a running run may wait for its end (the api's bound on `wait_s`)."""
UNFINISHED = ("pending", "running")


def next_wait(poll_interval_s: float, deadline: float | None) -> float:
    """How long the next read of a running run may wait for its end: `poll_interval_s` (at most
    `MAX_WAIT_S`), or less to meet `deadline` (a `time.monotonic()` value; None: none)."""
    wait_s = min(poll_interval_s, MAX_WAIT_S)
    return wait_s if deadline is None else max(0.0, min(wait_s, deadline - time.monotonic()))


def newly_finished(run: dict[str, Any], shown: set[str]) -> builtins.list[tuple[str, dict[str, Any]]]:
    """The steps of `run` that have finished and are not in `shown` yet (added to it), in run order."""
    finished = []
    for step_id, step in (run.get("steps") or {}).items():
        if step_id not in shown and step.get("status") not in UNFINISHED:
            shown.add(step_id)
            finished.append((step_id, step))
    return finished


class Runs:
    """The routine runs of a `B3OS` client's organization."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def get(self, run_id: str, *, wait_s: float | None = None) -> dict[str, Any]:
        """One run as it is now; with `wait_s`, a running run once it has ended or `wait_s` seconds (at most
        60) have passed, whichever comes first.

        Raises:
            NotFound: no run of this organization has that id.
        """
        return self._send(endpoints.get_run(run_id, wait_s))

    def wait(
        self,
        run_id: str,
        *,
        on_step: OnStep | None = None,
        poll_interval_s: float = DEFAULT_POLL_S,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Wait until a run has ended and return it; tell `on_step` of each step as it finishes.

        Args:
            run_id: The run.
            on_step: Called as `on_step(step_id, step)` once per step, when the step has finished
                (`succeeded`, `failed`, `cancelled` or `skipped`), in the run's step order.
            poll_interval_s: The longest one read of the run waits for its end (`get(wait_s=...)`), so
                the run's end is seen at once and its finished steps every `poll_interval_s` (at most 60).
            timeout_s: Give up after this many seconds (default: wait as long as the run runs).

        Returns:
            The ended run (`status` is `succeeded`, `failed` or `cancelled`).

        Raises:
            WaitTimedOut: the run was still running after `timeout_s`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        shown: set[str] = set()
        wait_s = 0.0  # the first read answers at once
        while True:
            asked = time.monotonic()
            run: dict[str, Any] = self.get(run_id, wait_s=wait_s or None)
            for step_id, step in newly_finished(run, shown):
                if on_step is not None:
                    on_step(step_id, step)
            if run.get("status") != "running":
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimedOut(run_id, run, timeout_s or 0.0)
            time.sleep(max(0.0, asked + wait_s - time.monotonic()))  # an api that did not wait: wait here
            wait_s = next_wait(poll_interval_s, deadline)

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a running run: `{"run_id", "status": "cancelling"}`; it ends as `cancelled`.

        Raises:
            Conflict: the run has already ended.
        """
        return self._send(endpoints.cancel_run(run_id))

    def list(self, *, routine: str | None = None, limit: int | None = None) -> builtins.list[dict[str, Any]]:
        """The organization's runs, newest first (of one routine when `routine` is given)."""
        return self._send(endpoints.list_runs(routine, limit))

    def rerun(
        self, run_id: str, *, from_step: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Re-run an ended run from a step (default: its first failed step): a new run of the same routine
        version, inputs and pins that keeps the succeeded steps before that point without calling them.

        Raises:
            NotFound: no such run. Conflict: it still runs, or has no failed step and no `from_step`.
            InvalidRequest: `from_step` names no step of the routine.
        """
        return self._send(endpoints.rerun(run_id, from_step, idempotency_key=idempotency_key))


class AsyncRuns:
    """The routine runs of an `AsyncB3OS` client's organization (the methods of `Runs`, awaited)."""

    def __init__(self, send: AsyncSend) -> None:
        self._send = send

    async def get(self, run_id: str, *, wait_s: float | None = None) -> dict[str, Any]:
        """As `Runs.get`."""
        return await self._send(endpoints.get_run(run_id, wait_s))

    async def wait(
        self,
        run_id: str,
        *,
        on_step: OnStep | None = None,
        poll_interval_s: float = DEFAULT_POLL_S,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """As `Runs.wait`; `on_step` may be a coroutine function."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        shown: set[str] = set()
        wait_s = 0.0
        while True:
            asked = time.monotonic()
            run: dict[str, Any] = await self.get(run_id, wait_s=wait_s or None)
            for step_id, step in newly_finished(run, shown):
                if on_step is not None and inspect.isawaitable(said := on_step(step_id, step)):
                    await said
            if run.get("status") != "running":
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimedOut(run_id, run, timeout_s or 0.0)
            await asyncio.sleep(max(0.0, asked + wait_s - time.monotonic()))
            wait_s = next_wait(poll_interval_s, deadline)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """As `Runs.cancel`."""
        return await self._send(endpoints.cancel_run(run_id))

    async def list(
        self, *, routine: str | None = None, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """As `Runs.list`."""
        return await self._send(endpoints.list_runs(routine, limit))

    async def rerun(
        self, run_id: str, *, from_step: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """As `Runs.rerun`."""
        return await self._send(endpoints.rerun(run_id, from_step, idempotency_key=idempotency_key))
