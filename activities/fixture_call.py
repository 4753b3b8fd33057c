"""The step activity of `b3os routine test`: `call_action` answered from fixtures, never from the api.

Registered under the real activity's name (engine.steps.CALL_ACTION), so the routine workflow runs
unchanged. A call is answered by the first of the case's answers for its step that matches it (its input,
foreach item and attempt, `engine.offline.cases.Answer`), else by the first fixture of its pack's
`fixtures/` for that action whose input is the call's (`packs.fixtures`). As the api would, it first
checks the input against the action's inputSchema (`invalid_request` when it does not fit); an error
answer becomes the `ApplicationError` the real activity raises for that answer (activities.errors), and
failures count against the step's max-attempts by the real activity's ledger. A call that nothing
answers fails its step with a sentence naming the step and the action, which fails the case.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.call_action import Ledger
from activities.errors import BENIGN, error_for_answer
from engine import payloads
from engine.offline.book import CaseBook
from engine.offline.packs import LocalPacks
from engine.steps import CALL_ACTION, CallActionInput, CallActionResult
from packs.checks_util import path_of, render
from packs.fixtures import ERROR_STATUS
from packs.schemas import schema_errors

NO_FIXTURE = "no_fixture"
"""The code of a step's call that no answer and no fixture answers."""


class FixtureCalls:
    """The fixture-answered step activity, with the book of each case's run by workflow id."""

    def __init__(self, packs: LocalPacks) -> None:
        self._packs = packs
        self._books: dict[str, CaseBook] = {}

    def open(self, workflow_id: str, book: CaseBook) -> CaseBook:
        """Answer the run `workflow_id` from `book` (and record its calls there)."""
        self._books[workflow_id] = book
        return book

    def close(self, workflow_id: str) -> None:
        """Forget a run's book."""
        self._books.pop(workflow_id, None)

    @activity.defn(name=CALL_ACTION)
    async def call_action(self, input: CallActionInput) -> CallActionResult:
        """Answer one call of a step from the case's answers or the pack's fixtures."""
        info = activity.info()
        ledger = Ledger.of(info.heartbeat_details, info.attempt)
        if input.max_attempts is not None and ledger.failures >= input.max_attempts:
            raise ledger.exhausted(info.attempt)
        book = self._books[input.run_workflow_id or info.workflow_id or ""]  # a foreach chunk: its run's
        try:
            # schema checks are CPU work: off the worker's event loop
            return await asyncio.to_thread(self._answer, book, input, info.attempt)
        except ApplicationError as exc:
            raise ledger.close(exc, input.max_attempts) from None

    def _answer(self, book: CaseBook, input: CallActionInput, attempt: int) -> CallActionResult:
        book.calls.setdefault(input.step_id, {})[input.index] = input.input
        found = self._packs.action(input.ref)
        if found is None:  # the routine was validated against these packs: only a bug of ours lands here
            message = f"{input.ref} is not among the local packs"
            body = {"error": {"code": "not_found", "message": message}}
            raise error_for_answer(404, body, None, attempt=attempt)
        pack, action = found
        key = str(action.get("key"))
        schema = action.get("inputSchema")
        problems = schema_errors(schema, input.input) if isinstance(schema, dict) else []
        if problems:
            where = f"input{path_of(problems[0].absolute_path)}"
            body = {
                "error": {
                    "code": "invalid_request",
                    "reason": where,
                    "message": f"{where}: {problems[0].message}",
                }
            }
            raise error_for_answer(400, body, None, attempt=attempt)
        label = input.step_id if input.index is None else f"{input.step_id}[{input.index}]"
        answer = next(
            (a for a in book.answers.get(input.step_id, []) if a.matches(input.input, input.index, attempt)),
            None,
        )
        if answer is not None:
            source, output, error = (
                f"answers.{input.step_id}",
                answer.output,
                answer.error,
            )
        else:
            fixture = pack.fixtures.answer(key, input.input)
            if fixture is None:
                message = (
                    f"step {label} calls {input.ref} (action {key}) with input {render(input.input)}, and no "
                    f"fixture answers it: give answers.{input.step_id} in {book.test_file}, or add a fixture "
                    f"of action {key} with this input to {pack.root}/fixtures/"
                )
                if message not in book.missing:
                    book.missing.append(message)
                fields = {"code": NO_FIXTURE, "reason": None, "message": message, "attempt": attempt}
                raise ApplicationError(message, fields, type=NO_FIXTURE, non_retryable=True, category=BENIGN)
            source, output, error = f"{pack.root}/{fixture.path}", fixture.output, fixture.error
        book.answered_by.setdefault(input.step_id, {})[input.index] = source
        if error is not None:
            raise _error_answer(error, attempt)
        return CallActionResult(
            output=output, attempt=attempt, ref=input.ref, output_bytes=len(payloads.encode(output))
        )


def _error_answer(error: dict[str, Any], attempt: int) -> ApplicationError:
    """The real activity's error for the api's error answer `error` (its status from its code)."""
    fields = {k: v for k, v in error.items() if k != "retry_after"}
    fields.setdefault("message", f"the fixture's {error['code']} error")
    status = ERROR_STATUS[error["code"]]
    after = error.get("retry_after", 1 if status in (429, 503) else None)
    return error_for_answer(status, {"error": fields}, None if after is None else str(after), attempt=attempt)
