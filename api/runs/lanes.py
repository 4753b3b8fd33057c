"""The task queue a run starts on: the main lane, or the busy lane of organizations with many runs in flight.

A routine worker process works on its workflow tasks one Python thread at a time, so one organization's many
runs in a worker slow another organization's few there, whatever their priority (docs/performance.md,
round 21). The api starts a run whose priority key is `BUSY_FROM_PRIORITY` or later (its organization has 4
or more runs in flight, api.runs.limits.run_priority) on the busy lane's task queue
(`B3OS_TEMPORAL_BUSY_TASK_QUEUE`), which worker processes of their own poll (`b3os dev` starts one at a
lower CPU priority); every other run on the main queue. A run stays on its lane to its end.

A busy lane that no worker polls is not used: the api asks Temporal for the queue's pollers at most every
`LANE_CHECK_S`, so a deployment with workers on the main queue alone starts every run there.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

log = logging.getLogger(__name__)

BUSY_FROM_PRIORITY = 4
"""The first priority key (api.runs.limits.run_priority: 4 or more runs in flight) whose runs take the busy
lane."""

LANE_CHECK_S = 10.0
"""How long an api process goes by what it last learned of the busy lane's pollers."""

POLLER_SEEN_S = 120.0
"""A poller Temporal saw within this long serves the lane: an idle worker polls again at least every ~70 s
(the SDK's long poll), and Temporal remembers a poller for 5 minutes after its last poll."""

DESCRIBE_TIMEOUT = timedelta(seconds=5)
"""How long the api waits for Temporal to describe the busy lane (the starts that need it wait too)."""


class Lanes:
    """The task queues of one api process's run starts (see the module docstring)."""

    def __init__(self, main: str, busy: str | None) -> None:
        self._main = main
        self._busy = busy or None
        self._served = False
        self._checked_at = -math.inf
        self._lock = asyncio.Lock()

    async def queue(self, client: Client, priority: int) -> str:
        """The task queue of a run starting at `priority` (1 first .. 5 last)."""
        if self._busy is None or priority < BUSY_FROM_PRIORITY:
            return self._main
        return self._busy if await self._busy_served(client, self._busy) else self._main

    async def _busy_served(self, client: Client, busy: str) -> bool:
        async with self._lock:  # one question at a time: the starts waiting meanwhile take its answer
            if time.monotonic() - self._checked_at >= LANE_CHECK_S:
                self._served = await polled(client, busy)
                self._checked_at = time.monotonic()
            return self._served


async def polled(client: Client, queue: str) -> bool:
    """Whether a worker polled the workflow task queue `queue` within `POLLER_SEEN_S` (False when Temporal
    does not answer: the main lane then takes the run)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        described = await client.workflow_service.describe_task_queue(request, timeout=DESCRIBE_TIMEOUT)
    except RPCError as exc:
        log.warning("the busy lane %s is not used: Temporal did not describe it (%s)", queue, exc.message)
        return False
    seen_after = time.time() - POLLER_SEEN_S
    return any(p.last_access_time.ToSeconds() >= seen_after for p in described.pollers)
