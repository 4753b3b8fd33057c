"""A finished case's run held against its expectations: one sentence for each difference.

Only what the case gives is compared: the run's status (`succeeded` unless it says otherwise) and a part
of its failure's sentence, each named output, each named step's status, output, attempts and error fields
(`message` is a part of the step's sentence; the other fields are equal), and the inputs of each named
step's calls. Values are equal as JSON is (true is not 1, 1.0 is not 1). Every call that no fixture
answered is a difference too.
"""

from __future__ import annotations

import json
from typing import Any

from engine.offline.book import CaseBook
from engine.offline.cases import Expect
from engine.runs import RunRoutineResult
from packs.checks_util import same

SHOWN_CHARS = 300
_ABSENT = object()


def differences(expect: Expect, result: RunRoutineResult, failure: str | None, book: CaseBook) -> list[str]:
    """Every way the run differs from what the case expects ([] when it passed)."""
    out = list(book.missing)
    if result.status != expect.status:
        why = f": {failure}" if failure else ""
        out.append(f"the run ended {result.status}, expected {expect.status}{why}")
    if expect.error is not None and (failure is None or expect.error not in failure):
        got = "no failure" if failure is None else f"the failure {show(failure)}"
        out.append(f"the run's failure should contain {show(expect.error)}, but it ended with {got}")
    for name, want in expect.outputs.items():
        got = result.outputs.get(name, _ABSENT)
        if got is _ABSENT:
            out.append(f"outputs.{name} is absent (the run ended {result.status}), expected {show(want)}")
        elif not same(got, want):
            out.append(f"outputs.{name} is {show(got)}, expected {show(want)}")
    for step_id, want_step in expect.steps.items():
        step = result.steps[step_id]
        if want_step.status is not None and step.status != want_step.status:
            why = f" ({step.error.code}: {step.error.message})" if step.error is not None else ""
            out.append(f"step {step_id} ended {step.status}{why}, expected {want_step.status}")
        if "output" in want_step.model_fields_set and not same(step.output, want_step.output):
            out.append(f"steps.{step_id}.output is {show(step.output)}, expected {show(want_step.output)}")
        if want_step.attempts is not None and step.attempts != want_step.attempts:
            out.append(f"step {step_id} took {step.attempts} attempt(s), expected {want_step.attempts}")
        if want_step.error is not None:
            out.extend(
                _error_differences(step_id, step.error.model_dump() if step.error else None, want_step.error)
            )
    for step_id, want_calls in expect.calls.items():
        got_calls = book.inputs_of(step_id)
        if not same(got_calls, want_calls):
            out.append(
                f"step {step_id} made {len(got_calls)} call(s) with the inputs {show(got_calls)}, "
                f"expected {len(want_calls)}: {show(want_calls)}"
            )
    return out


def _error_differences(step_id: str, got: dict[str, Any] | None, want: dict[str, Any]) -> list[str]:
    if got is None:
        return [f"step {step_id} has no error, expected one with {show(want)}"]
    out = []
    for key, value in want.items():
        actual = got.get(key, _ABSENT)
        if key == "message" and isinstance(actual, str) and isinstance(value, str):
            if value not in actual:
                out.append(f"steps.{step_id}.error.message {show(actual)} does not contain {show(value)}")
        elif actual is _ABSENT or not same(actual, value):
            shown = "absent" if actual is _ABSENT else show(actual)
            out.append(f"steps.{step_id}.error.{key} is {shown}, expected {show(value)}")
    return out


def show(value: Any) -> str:
    """A value as compact JSON, cut at `SHOWN_CHARS` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
