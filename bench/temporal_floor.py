"""The floor of a routine step on this machine's Temporal: a bare workflow of the Python SDK, as its
samples write one, whose one activity does nothing, on the same dev server as the routines.

`bench goals` starts this module as a worker process of its own (`python -m bench.temporal_floor
ADDRESS QUEUE`: the SDK's defaults, its sandbox, the activity on the same queue) and times 100 of these
workflows started at once beside the burst of 100 one-step routines: what the routine engine (its
api, its worker, the node) adds to Temporal's own work is the difference.

It also gives a routine step's Temporal share its floor: the same workflows one after the other.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def floor_step(value: int) -> int:
    """Nothing: the step's own time is as small as a step's can be."""
    return value


@workflow.defn
class FloorWorkflow:
    """One activity, its result the workflow's."""

    @workflow.run
    async def run(self, value: int) -> int:
        return await workflow.execute_activity(
            floor_step, value, start_to_close_timeout=timedelta(seconds=30)
        )


async def serve(address: str, queue: str) -> None:
    client = await Client.connect(address)
    async with Worker(client, task_queue=queue, workflows=[FloorWorkflow], activities=[floor_step]):
        print("polling", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
