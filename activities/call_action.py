"""The step activity: `call_action`, the only place a routine step touches the outside.

It sends `POST {B3OS_API_URL}/v1/actions/call` with `{"ref", "input"}` (and `timeout_ms` only when
the step sets `timeout`), on behalf of the API key that started the run, with the step's derived
`Idempotency-Key`, the worker token, the run's grant (`X-B3OS-Run-Grant`, minted by the api when it
started the run) and the step it calls for (`X-B3OS-Run-Step`): the api honours the call only for a
run it started that still runs (api.runs.grants). It heartbeats while it waits so that a cancelled
run cancels the attempt; a cancelled attempt then sends `POST /v1/actions/call/cancel
{"idempotency_key"}` with the same headers, so the call's node kills its VM at once instead of
letting it run to its timeout. An output that could not travel back to the workflow (over
`engine.payloads.STEP_OUTPUT_LIMIT_BYTES`, nested deeper than 64 levels, or text that is not
Unicode) fails the step for good, `payload_too_large` or `payload_invalid`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.config import ActivitySettings
from activities.errors import BENIGN, error_for_answer, error_for_response, is_wait, network_error
from activities.idempotency import step_idempotency_key
from engine import payloads
from engine.steps import CALL_ACTION, CallActionInput, CallActionResult
from http1.client import Http1, Http1Error, Response
from telemetry import tracing

CALL_PATH = "/v1/actions/call"
CANCEL_PATH = "/v1/actions/call/cancel"
_CANCEL_S = 5.0  # how long a cancelled attempt tries to stop its call
_SLACK_S = 30.0  # what the api may add to a call's own time (queueing, VM start and delete)
_DEFAULT_READ_S = 120.0  # a call without timeout_ms runs to its action's timeout (60 s at most)


class Ledger:
    """What a step's attempts so far counted against its `max-attempts`, carried from attempt to attempt
    in the activity's heartbeat details: the failures counted, and the attempts that closed the ledger.

    Waiting is not failing: a 429 or 503 (and 409 idempotency_in_progress) is retried after its
    Retry-After without counting. A retryable failure counts; so does an attempt that ended without
    closing the ledger (it timed out, or its worker died): every attempt before this one that did not
    close it. So an attempt need not heartbeat when it starts, only when it closes the ledger (and then
    every second while its call runs, for a cancellation to reach it). When the count reaches the step's
    `max-attempts`, the failure is final (`non_retryable`).
    """

    def __init__(self, failures: int, attempt: int) -> None:
        self.failures = failures
        self.closed = attempt - 1  # every earlier attempt is accounted for now

    @classmethod
    def of(cls, details: Any, attempt: int) -> Ledger:
        """The ledger the previous attempts left (none on the first attempt), for attempt `attempt`."""
        found = details[0] if details and isinstance(details[0], dict) else {}
        failures = found.get("failures")
        failures = failures if isinstance(failures, int) and failures >= 0 else 0
        if "closed" not in found and "open" in found:  # a worker before `closed`: was its last one open
            unclosed = 1 if found["open"] is True else 0
        else:  # every earlier attempt that did not close it (all of them when none left a ledger)
            closed = found.get("closed")
            unclosed = attempt - 1 - (closed if isinstance(closed, int) and 0 <= closed < attempt else 0)
        return cls(failures + unclosed, attempt)

    def details(self) -> dict[str, Any]:
        """The heartbeat details."""
        return {"failures": self.failures, "closed": self.closed}

    def close(self, error: ApplicationError, max_attempts: int | None) -> ApplicationError:
        """Count the attempt's failure (unless it asks to wait), record it, and return what to raise."""
        self.closed += 1
        if not is_wait(error) and not error.non_retryable:
            self.failures += 1
            if max_attempts is not None and self.failures >= max_attempts:
                error = ApplicationError(
                    error.message, *error.details, type=error.type, non_retryable=True, category=BENIGN
                )
        activity.heartbeat(self.details())
        return error

    def exhausted(self, attempt: int) -> ApplicationError:
        """The step's attempts are used up by attempts that did not end (timed out, or a worker died)."""
        message = f"the step's call did not finish in time in {self.failures} attempt(s)"
        fields = {"code": "step_timed_out", "reason": "attempts", "message": message, "attempt": attempt - 1}
        return ApplicationError(message, fields, type="step_timed_out", non_retryable=True, category=BENIGN)


class ActionActivities:
    """The step activities, holding the worker's settings and one HTTP client."""

    def __init__(self, settings: ActivitySettings) -> None:
        """Keep the settings; the HTTP client is made on first use, inside the event loop.

        Args:
            settings: Where to send calls and the worker token.
        """
        self._settings = settings
        self._client: Http1 | None = None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> Http1:
        if self._client is None:
            self._client = Http1(base_url=self._settings.api_url)
        return self._client

    def _post(
        self, path: str, body: dict[str, Any], headers: dict[str, str], *, read_s: float, connect_s: float
    ) -> Any:
        """The POST of `body` as JSON to the api (a coroutine): answered within `read_s` once connected."""
        content = json.dumps(body, separators=(",", ":")).encode()
        headers = {**headers, "Content-Type": "application/json"}
        return self._http().post(
            path, content=content, headers=headers, timeout_s=connect_s + read_s, connect_s=connect_s
        )

    @activity.defn(name=CALL_ACTION)
    async def call_action(self, input: CallActionInput) -> CallActionResult:
        """Call the step's action through the api and return its output.

        Args:
            input: The ref, the evaluated input, the key id and where the call sits in the run.

        Returns:
            The action's output, the attempt that got it, the call id and cost when the api gives them.

        Raises:
            ApplicationError: Retryable (with Retry-After as next_retry_delay) or not, see activities.errors.
        """
        info = activity.info()
        if not info.workflow_id:
            raise ApplicationError("call_action runs only inside a routine run", non_retryable=True)
        # a foreach's child workflow calls under its run's keys (engine.foreach)
        key = step_idempotency_key(input.run_workflow_id or info.workflow_id, input.step_id, input.index)
        body: dict[str, Any] = {"ref": input.ref, "input": input.input}
        read_s = _DEFAULT_READ_S
        if input.timeout_ms is not None:
            body["timeout_ms"] = input.timeout_ms
            read_s = input.timeout_ms / 1000 + _SLACK_S
        headers = self._headers(input, key)
        ledger = Ledger.of(info.heartbeat_details, info.attempt)
        if input.max_attempts is not None and ledger.failures >= input.max_attempts:
            raise ledger.exhausted(info.attempt)
        request = self._post(CALL_PATH, body, headers, read_s=read_s, connect_s=10.0)
        try:
            response = await self._wait_heartbeating(request, ledger)
        except asyncio.CancelledError:
            await self._cancel_call(key, input)
            details = activity.cancellation_details()
            if details is not None and details.not_found:  # the run's workflow is gone: ended or terminated
                raise ApplicationError(
                    "the run has ended: its step's call was cancelled",
                    type="RunEnded",
                    non_retryable=True,
                    category=ApplicationErrorCategory.BENIGN,  # nothing to see in the worker's log
                ) from None
            raise
        except Http1Error as exc:
            error = network_error(exc, self._settings.api_url, attempt=info.attempt)
            activity.logger.warning("step %s attempt %d: %s", input.step_id, info.attempt, error)
            raise ledger.close(error, input.max_attempts) from None
        if response.status_code // 100 != 2:
            error = error_for_response(response, attempt=info.attempt, key=key)
            activity.logger.info(
                "step %s attempt %d: %s answered %d %s",
                input.step_id,
                info.attempt,
                input.ref,
                response.status_code,
                error,
            )
            raise ledger.close(error, input.max_attempts)
        try:
            answer: Any = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict):
            bad = {"code": "bad_answer", "message": "the api's answer is not a JSON object"}
            raise error_for_answer(502, bad, None, attempt=info.attempt, key=key)
        output = answer.get("output")
        try:
            measured = payloads.measure(output, "the output", payloads.STEP_OUTPUT_LIMIT_BYTES)
        except payloads.PayloadError as exc:
            # the api keeps this answer under the step's key: another attempt would get it again
            fields = {"code": exc.code, "reason": "output", "message": exc.message, "attempt": info.attempt}
            raise ApplicationError(exc.message, fields, type=exc.code, non_retryable=True) from None
        return CallActionResult(
            output=output,
            attempt=info.attempt,
            call_id=answer.get("call_id") or answer.get("id"),
            ref=answer.get("ref") if isinstance(answer.get("ref"), str) else None,
            cost=answer.get("cost") if isinstance(answer.get("cost"), dict) else None,
            output_bytes=measured.size,
        )

    def _headers(self, input: CallActionInput, key: str) -> dict[str, str]:
        """The worker token, the run's grant and the step: what the api checks on a step's call or cancel."""
        headers = {
            "Authorization": f"Bearer {self._settings.worker_token.get_secret_value()}",
            "X-B3OS-On-Behalf-Of": input.key_id,
            "X-B3OS-Run-Step": input.step_id if input.index is None else f"{input.step_id}/{input.index}",
            # the Temporal run this activity belongs to, as Temporal says: the one execution the grant serves
            "X-B3OS-Run-Execution": activity.info().workflow_run_id or "",
            "Idempotency-Key": key,
        }
        if input.run_workflow_id:  # a foreach's child workflow: the api asks Temporal for its parent
            headers["X-B3OS-Run-Workflow"] = activity.info().workflow_id or ""
        if input.grant:
            headers["X-B3OS-Run-Grant"] = input.grant
        tracing.inject(headers)  # the api's call joins the run's trace (the activity's span)
        return headers

    async def _cancel_call(self, key: str, input: CallActionInput) -> None:
        """The run was cancelled: ask the api to stop the call sent with `key` (its node kills the VM).

        A call still being placed (409) is asked again, for at most `_CANCEL_S`; any other failure is
        logged and left: the call then runs to its end, as before.
        """
        headers = self._headers(input, key)
        give_up = asyncio.get_running_loop().time() + _CANCEL_S
        while True:
            try:
                response = await self._post(
                    CANCEL_PATH, {"idempotency_key": key}, headers, read_s=_CANCEL_S, connect_s=2.0
                )
            except Http1Error as exc:
                activity.logger.warning("step %s: the call could not be cancelled: %s", input.step_id, exc)
                return
            if response.status_code != 409 or asyncio.get_running_loop().time() > give_up:
                break
            await asyncio.sleep(0.2)
        if response.status_code // 100 == 2:
            activity.logger.info("step %s: cancelled its call: %s", input.step_id, response.text)
        else:
            status, text = response.status_code, response.text
            activity.logger.warning("step %s: its cancel answered %d %s", input.step_id, status, text)

    async def _wait_heartbeating(self, request: Any, ledger: Ledger) -> Response:
        """Await the request, heartbeating every `heartbeat_interval_s` meanwhile so that a cancellation
        reaches this attempt (each heartbeat carries the step's attempts ledger to the next attempt). A
        call that answers within the first interval sends no heartbeat: for most calls, one request to
        Temporal and one write of the run's state fewer."""
        task: asyncio.Task[Response] = asyncio.ensure_future(request)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._settings.heartbeat_interval_s)
                if done:
                    return task.result()
                activity.heartbeat(ledger.details())
        finally:
            if not task.done():
                task.cancel()
