"""`GET /v1/runs/{id}?wait_s=N`: a read of a running run that answers as soon as the run ends, or after N
seconds, so a client waiting for a run asks once a second or so instead of polling every 100 ms.

The wait is Temporal's own long poll of the run's close event (`GetWorkflowExecutionHistory` with
`wait_new_event` and the close-event filter, as the Temporal SDK's `result()` waits), renewed when
the server's long poll expires (~20 s) before the wait is over. Temporal's frontend ends a long poll
`LONG_POLL_TAIL_ROOM_S` before the gRPC deadline it is given, and answers at once (an empty page) when
less than that is left: each poll is asked with that much more than the wait has left and cut at the
wait's end here, so a wait's last second is one poll, not a loop of them (it was ~150 polls a second,
and 20 waiting reads took most of the dev server's CPU). An api process keeps at most
`MAX_WAITING` such reads waiting at once; past that a read answers at once, as without `wait_s`.
A run whose workflow Temporal calls busy (`RESOURCE_EXHAUSTED`, "Workflow is busy": its history is
being written under load) is asked again `BUSY_PAUSE_S` later until the wait is over: the read then
answers what is known of the run, never 503 for that.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import HistoryEventFilterType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.errors import ServiceUnavailable

MAX_WAIT_S = 60
"""The longest `wait_s` a read may ask."""

MAX_WAITING = 1_000
"""Reads one api process keeps waiting at once; more answer at once."""

BUSY_PAUSE_S = 0.5
"""How long a wait pauses before it asks again about a workflow Temporal calls busy."""

LONG_POLL_TAIL_ROOM_S = 1.0
"""What Temporal's frontend keeps of a long poll's deadline (its `longPollTailRoom`, a constant)."""

DEADLINE_SLACK_S = 0.05
"""An error this close to the wait's end is the wait's own timeout."""


class Waits:
    """The reads of running runs waiting in this api process."""

    def __init__(self) -> None:
        self.waiting = 0

    async def until_closed(self, client: Client, workflow_id: str, wait_s: float) -> None:
        """Return once the run's workflow has closed, or after `wait_s` seconds (at once past `MAX_WAITING`).

        Raises:
            ServiceUnavailable: Temporal did not answer the long poll (other than by its deadline).
        """
        if self.waiting >= MAX_WAITING:
            return
        self.waiting += 1
        try:
            await _until_closed(client, workflow_id, wait_s)
        finally:
            self.waiting -= 1


async def _until_closed(client: Client, workflow_id: str, wait_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id),
        wait_new_event=True,
        history_event_filter_type=HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT,
        skip_archival=True,
    )
    while (left := deadline - loop.time()) > 0:
        # The client's long poll of history does not always keep the gRPC deadline it is given (it has
        # its own for long polls), and says so as "Timeout expired" when it does: the wait ends here.
        call = client.workflow_service.get_workflow_execution_history(
            request, retry=False, timeout=timedelta(seconds=left + LONG_POLL_TAIL_ROOM_S + DEADLINE_SLACK_S)
        )
        try:
            answer = await asyncio.wait_for(call, timeout=left)
        except TimeoutError:
            return
        except RPCError as exc:
            if exc.status == RPCStatusCode.DEADLINE_EXCEEDED or loop.time() >= deadline - DEADLINE_SLACK_S:
                return
            if exc.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                await asyncio.sleep(min(BUSY_PAUSE_S, max(deadline - loop.time(), 0)))
                continue
            raise ServiceUnavailable(
                f"Temporal did not wait for the run: {exc.message}", retry_after_s=5
            ) from exc
        if answer.history.events or not answer.next_page_token:
            return  # closed (or nothing more to wait for)
        request.next_page_token = answer.next_page_token  # the server's long poll expired: again
