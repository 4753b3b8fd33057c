"""The activities of a schedule's tick (engine.schedule_workflow): start a scheduled run, wait for its end;
and of a poll trigger's poll (engine.poll_workflow): ask the api to poll.

`start_scheduled_run` sends `POST {B3OS_API_URL}/v1/schedules/{id}/runs` with the worker token and
the schedule's grant (`X-B3OS-Schedule-Grant`) and an Idempotency-Key derived from the tick's
workflow id (one per firing), so a retried attempt gets the run the first one started. The api
answers with an ordinary run, started as any other (its own grant, keys, limits and charges).
Failures map as a step call's do (activities.errors): 429 and 503 wait their Retry-After, other 4xx
end the tick. `wait_run_ended` watches that run's workflow on Temporal until it has closed,
heartbeating.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from activities.config import ActivitySettings
from activities.errors import error_for_response, network_error
from engine.polls import PollTriggerInput, PollTriggerResult
from engine.ticks import (
    StartScheduledRunInput,
    StartScheduledRunResult,
    WaitRunEndedInput,
    WaitRunEndedResult,
)

SCHEDULE_GRANT_HEADER = "X-B3OS-Schedule-Grant"
POLL_S = 2.0


class ScheduleActivities:
    """The tick's activities, holding the worker's api settings and its Temporal client."""

    def __init__(self, settings: ActivitySettings, client: Client) -> None:
        self._settings = settings
        self._client = client
        self._tls: ssl.SSLContext | None = None  # one for every tick's client: httpx loads the CAs per client

    @activity.defn(name="start_scheduled_run")
    async def start_scheduled_run(self, input: StartScheduledRunInput) -> StartScheduledRunResult:
        """Ask the api for a run of the schedule; the run's id and workflow id.

        Raises:
            ApplicationError: retryable after Retry-After (429, 503) or with backoff (5xx, network);
                non-retryable for any other refusal (the api's code and sentence).
        """
        info = activity.info()
        key = f"schedule-{info.workflow_id}"[:255]
        headers = {
            "Authorization": f"Bearer {self._settings.worker_token.get_secret_value()}",
            SCHEDULE_GRANT_HEADER: input.grant,
            "Idempotency-Key": key,
            # this tick as Temporal gave it: the api asks the schedule whether it started it
            "X-B3OS-Tick": info.workflow_id or "",
            "X-B3OS-Run-Execution": info.workflow_run_id or "",
        }
        url = f"{self._settings.api_url.rstrip('/')}/v1/schedules/{input.schedule_id}/runs"
        try:
            self._tls = self._tls or httpx.create_ssl_context()
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0), verify=self._tls) as http:
                response = await http.post(url, headers=headers, json={})
        except httpx.TransportError as exc:
            raise network_error(exc, self._settings.api_url, attempt=info.attempt) from None
        if response.status_code // 100 != 2:
            error = error_for_response(response, attempt=info.attempt, key=key)
            activity.logger.info(
                "schedule %s: the api answered %d %s", input.schedule_id, response.status_code, error
            )
            raise error
        try:
            answer: Any = response.json()
            return StartScheduledRunResult(run_id=answer["run_id"], workflow_id=answer["workflow_id"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            raise ApplicationError("the api's answer is not a run", type="bad_answer") from None

    @activity.defn(name="wait_run_ended")
    async def wait_run_ended(self, input: WaitRunEndedInput) -> WaitRunEndedResult:
        """Wait until the run's workflow has closed; its Temporal status (`completed`, `failed`, ...)."""
        handle = self._client.get_workflow_handle(input.workflow_id)
        while True:
            activity.heartbeat()
            status = (await handle.describe()).status
            if status is not None and status != WorkflowExecutionStatus.RUNNING:
                return WaitRunEndedResult(status=status.name.lower())
            await asyncio.sleep(POLL_S)

    @activity.defn(name="poll_trigger")
    async def poll_trigger(self, input: PollTriggerInput) -> PollTriggerResult:
        """Ask the api to poll a poll trigger's subscription (`POST /v1/triggers/polls/{id}`, worker token).

        Raises:
            ApplicationError: retryable after Retry-After (429, 503: the api's or the upstream's) or with
                backoff (5xx, network); non-retryable for any other refusal (the api's code and sentence).
        """
        info = activity.info()
        headers = {"Authorization": f"Bearer {self._settings.worker_token.get_secret_value()}"}
        url = f"{self._settings.api_url.rstrip('/')}/v1/triggers/polls/{input.subscription_id}"
        try:
            self._tls = self._tls or httpx.create_ssl_context()
            async with httpx.AsyncClient(timeout=httpx.Timeout(50.0, connect=10.0), verify=self._tls) as http:
                response = await http.post(url, headers=headers, json={})
        except httpx.TransportError as exc:
            raise network_error(exc, self._settings.api_url, attempt=info.attempt) from None
        if response.status_code // 100 != 2:
            raise error_for_response(response, attempt=info.attempt, key=None)
        try:
            return PollTriggerResult.model_validate(response.json())
        except ValueError:
            raise ApplicationError("the api's answer is not a poll's", type="bad_answer") from None
