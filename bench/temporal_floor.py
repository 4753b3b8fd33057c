"""The floor of a routine step on this machine's Temporal: a bare workflow of the Python SDK, as its
samples write one, whose one activity does nothing, on the same dev server as the routines.

`bench goals` starts this module as a worker process of its own (`python -m bench.temporal_floor
ADDRESS QUEUE`: the SDK's defaults, its sandbox, the activity on the same queue) and times 100 of these
workflows started at once beside the burst of 100 one-step routines: what the routine engine (its
api, its worker, the node) adds to Temporal's own work is the difference.

It also gives a routine step's Temporal share its floor: the same workflows one after the other.

`FloorNodeWorkflow` is the same workflow whose one activity makes the routine's call, the echo tool's
`noop` of pack `B3OS_BENCH_NODE_PACK`, straight to a node (signed as the api signs it;
`B3OS_BENCH_NODE_URL`, `B3OS_BENCH_NODE_ID`, `B3OS_BENCH_NODE_KEY`): 100 of them at once are what the
burst costs with the VMs but without the routine engine (its api, its workflow).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from api.calls.nodeclient import NodeTarget, send_call
    from bench.echo_calls import echo_tool_call
    from http1.client import Http1

_node_client: Http1 | None = None
_call_ids = itertools.count()


@activity.defn
async def floor_step(value: int) -> int:
    """Nothing: the step's own time is as small as a step's can be."""
    return value


@activity.defn
async def node_step(value: int) -> int:
    """The echo tool's `noop`, straight to the node, as a routine step's call reaches it."""
    global _node_client
    _node_client = _node_client or Http1()
    node = NodeTarget(
        os.environ["B3OS_BENCH_NODE_URL"], os.environ["B3OS_BENCH_NODE_ID"], os.environ["B3OS_BENCH_NODE_KEY"]
    )
    call_id = f"tcall_floor_{os.getpid()}_{next(_call_ids)}"
    body = echo_tool_call(call_id, os.environ["B3OS_BENCH_NODE_PACK"], "noop", {})
    reply = await send_call(_node_client, node=node, body=body, timeout_s=30)
    if reply.result.get("ok") is not True:
        raise RuntimeError(f"the node answered {reply.status}: {reply.failure or reply.result}")
    return value


@workflow.defn
class FloorWorkflow:
    """One activity, its result the workflow's."""

    @workflow.run
    async def run(self, value: int) -> int:
        return await workflow.execute_activity(
            floor_step, value, start_to_close_timeout=timedelta(seconds=30)
        )


@workflow.defn
class FloorNodeWorkflow:
    """One activity, the noop call straight to the node; its result the workflow's."""

    @workflow.run
    async def run(self, value: int) -> int:
        return await workflow.execute_activity(node_step, value, start_to_close_timeout=timedelta(seconds=30))


async def serve(address: str, queue: str) -> None:
    client = await Client.connect(address)
    workflows, activities = [FloorWorkflow, FloorNodeWorkflow], [floor_step, node_step]
    async with Worker(client, task_queue=queue, workflows=workflows, activities=activities):
        print("polling", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
