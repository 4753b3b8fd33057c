"""How much expression work a run does in one workflow task: a `Pacer` spreads it over several.

A routine's expressions are compiled and evaluated inside its workflow, in the worker's workflow tasks, and
Temporal fails a workflow task whose code does not yield within 2 s (deadlock detection). Each field is
bounded on its own (`cel_values.Budget`: steps, values read, characters built; `cel_syntax`: 2,000
characters an expression, 8,000 a field); what a bound per field does not cap is how many fields one task
evaluates: steps that start together, a foreach's items, a batch of calls that ended together. Compiling
costs ~25-50 us a character on this machine (a list literal of 2,000 characters: 100 ms when the machine
is busy), an evaluation step ~5-8 us and a value read ~6 us, and a worker whose cache of compiled
expressions is cold (a restart, a replay after eviction) compiles each again.

So the pacer counts the work of each evaluation in units, and once `WORK_PER_TASK` of them have been done
since the last pause, the next evaluation first waits on a timer of `PAUSE`: the timer ends the workflow
task, and the evaluation runs in the next one. A unit is an expression's character (what compiling costs),
5 evaluation steps or 5 values read (10 and 25 before `PATCH_STEP_COST`). The units come from the
routine's text and its data, never from the clock or from what the worker has cached (an expression
compiled before costs the same), so a replay pauses exactly where the run did. Runs started before
pausing existed replay without it (`PATCH_PACING`); a run that never does this much work between its
calls never pauses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow

from engine import expressions
from engine.cel_values import Budget

PATCH_PACING = "routines-v4-pacing"

PATCH_EXACT_INTEGERS = "routines-v5-exact-integers"
"""A result integer beyond 2^53 - 1 fails its expression (`cel_values.to_json`); runs started before
replay as they ran (it was kept). Marked only in a run that meets such an integer."""

PATCH_SHORT_TASKS = "routines-v6-short-tasks"
"""`WORK_PER_TASK` instead of `WORK_PER_TASK_V4`; runs started before pause where they paced. Marked only in
a run whose work between pauses passes `WORK_PER_TASK`."""

PATCH_STEP_COST = "routines-v7-step-cost"
"""Evaluation steps and values read counted at what they cost (`STEPS_PER_UNIT`, `VALUES_PER_UNIT`):
before, a step counted a tenth of a unit and a value a 25th, so a task of heavy evaluation (a foreach
whose items each filter a list of 300) ran ~7x the time its units said. Runs started before count as
they did; marked only in a run where the two counts pause at different places."""

WORK_PER_TASK = 1_000
"""Units of expression work one workflow task may do before the next evaluation waits for a new task:
~25-50 ms of this machine's CPU (one field may still take more: 8,000 characters at most). A worker runs
a few tasks at once on one Python thread of work at a time, so a quiet organization's task waits for
and shares it with what a heavy run's tasks do: at 4,000, a small run's workflow tasks waited ~800 ms
beside 20 heavy runs in the slowest tenth, at 500 ~175 ms (docs/performance.md, round 20)."""

WORK_PER_TASK_V4 = 4_000
"""What a workflow task did before `PATCH_SHORT_TASKS` (~100-200 ms)."""

PAUSE = timedelta(milliseconds=1)
"""The timer a pause waits on: any duration ends the workflow task; its history costs 3 events."""

STEPS_PER_UNIT = 5
VALUES_PER_UNIT = 5
STEPS_PER_UNIT_V6 = 10
VALUES_PER_UNIT_V6 = 25

T = TypeVar("T")


def characters(value: Any) -> int:
    """The characters of every expression in a field's value (a `${{ }}` template, a bare `if:`, or a
    structure holding them)."""
    if isinstance(value, str) and expressions.OPEN not in value:
        return len(value)  # a bare `if:` or `foreach:` expression
    return sum(len(expr) for expr in expressions.iter_expressions(value))


def _exact_integers() -> bool:
    return workflow.patched(PATCH_EXACT_INTEGERS)


class Pacer:
    """The expression work of one run since its last pause (workflow code: deterministic)."""

    def __init__(self) -> None:
        self.done = 0
        self._done_v6 = 0  # the same work as counted before PATCH_STEP_COST
        self._paused: asyncio.Event | None = None  # set when the pause under way ends

    async def evaluate(self, field: Any, evaluation: Callable[[Budget], T]) -> T:
        """Run `evaluation` (given the budget it spends) for a field holding `field`'s expressions, after a
        pause when the work since the last one and this field's characters pass `WORK_PER_TASK` (a field
        without expressions never waits)."""
        chars = characters(field)
        while chars and self.done and self._over(chars):
            await self._pause()
        budget = Budget(exact=_exact_integers)
        try:
            return evaluation(budget)
        finally:
            self.done += chars + budget.steps // STEPS_PER_UNIT + budget.values // VALUES_PER_UNIT
            self._done_v6 += chars + budget.steps // STEPS_PER_UNIT_V6 + budget.values // VALUES_PER_UNIT_V6

    def _over(self, chars: int) -> bool:
        """Whether the work since the last pause and `chars` more are more than one workflow task does.
        Each patch is asked only where it changes the answer, so a run that never reaches that point
        records no marker."""
        now = self.done + chars > WORK_PER_TASK
        before = self._over_v6(self._done_v6 + chars)
        if now and not before:  # the count of steps and values alone says pause (never the other way)
            return workflow.patched(PATCH_STEP_COST)
        return before

    @staticmethod
    def _over_v6(work: int) -> bool:
        """Whether `work` units, counted as before `PATCH_STEP_COST`, are more than one task does."""
        if work <= WORK_PER_TASK:
            return False
        return work > (WORK_PER_TASK if workflow.patched(PATCH_SHORT_TASKS) else WORK_PER_TASK_V4)

    async def _pause(self) -> None:
        """Wait for a new workflow task: on the timer of the pause under way, or on a new one."""
        if self._paused is not None:
            await self._paused.wait()
            return
        self._paused = paused = asyncio.Event()
        try:
            if workflow.patched(PATCH_PACING):
                await workflow.sleep(
                    PAUSE, summary="a pause: the run's expressions go on in a new workflow task"
                )
        finally:
            self.done, self._done_v6, self._paused = 0, 0, None
            paused.set()
