"""The routine worker: `python -m engine.worker` (also started by `b3os dev`).

Connects to Temporal (`B3OS_TEMPORAL_ADDRESS`, `B3OS_TEMPORAL_NAMESPACE`), makes sure the search
attributes `B3osRoutine` and `B3osOrg` exist, and polls the task queue `b3os-routines` (override:
`B3OS_TEMPORAL_TASK_QUEUE`) with the routine workflow and the `call_action` activity. The activity
settings (`B3OS_API_URL`, `B3OS_WORKER_TOKEN`) stay in this process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import py_compile
import signal
from datetime import timedelta

from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from engine import expressions
from engine.runs import ROUTINES_TASK_QUEUE, SEARCH_ATTRIBUTE_ORG, SEARCH_ATTRIBUTE_ROUTINE
from engine.workflow import RoutineWorkflow

__all__ = ["ROUTINES_TASK_QUEUE", "TemporalSettings", "build_worker", "connect", "ensure_search_attributes"]

log = logging.getLogger("b3os.worker")


class TemporalSettings(BaseSettings):
    """Where the Temporal server is (env prefix `B3OS_TEMPORAL_`)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_TEMPORAL_", extra="ignore")

    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = ROUTINES_TASK_QUEUE


async def connect(address: str, namespace: str = "default") -> Client:
    """A Temporal client with the pydantic data converter every b3os process uses.

    Args:
        address: host:port of the Temporal frontend.
        namespace: The Temporal namespace.

    Returns:
        The connected client.
    """
    return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)


async def ensure_search_attributes(client: Client) -> None:
    """Register the keyword search attributes `B3osRoutine` and `B3osOrg` when they are missing.

    A server that refuses (no operator rights) is logged, not fatal: runs then start without them.
    """
    ns = client.namespace
    try:
        have = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=ns))
        missing = {
            name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            for name in (SEARCH_ATTRIBUTE_ROUTINE, SEARCH_ATTRIBUTE_ORG)
            if name not in have.custom_attributes
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=ns, search_attributes=missing)
            )
            log.info("registered search attributes %s", ", ".join(sorted(missing)))
    except RPCError as exc:
        log.warning("could not register the search attributes: %s", exc.message)


def cache_workflow_bytecode() -> None:
    """Write the workflow module's bytecode (`__pycache__`) if it is missing.

    The sandbox imports `engine.workflow` again for every run; without its bytecode on disk (an
    interpreter under PYTHONDONTWRITEBYTECODE, as in many images) each run compiles the module from
    source first, some milliseconds of every run's first workflow task. A read-only tree keeps the old
    behaviour.
    """
    import engine.workflow as module

    source = module.__file__
    if source is None or not source.endswith(".py"):
        return
    cached = importlib.util.cache_from_source(source)
    try:
        if not os.path.exists(cached) or os.path.getmtime(cached) < os.path.getmtime(source):
            py_compile.compile(source, cfile=cached, doraise=True)
    except (OSError, py_compile.PyCompileError) as exc:
        log.info("the workflow's bytecode is not cached (%s): each run compiles it", exc)


def build_worker(client: Client, task_queue: str, activities: ActionActivities) -> Worker:
    """The worker that runs routine workflows and step activities on one task queue.

    Args:
        client: A client made by `connect`.
        task_queue: The task queue to poll (`ROUTINES_TASK_QUEUE` outside tests).
        activities: The step activities, holding the worker's api settings.

    Returns:
        A worker to `run()` or use as an async context manager.
    """
    cache_workflow_bytecode()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RoutineWorkflow],
        activities=[activities.call_action],
        max_concurrent_activities=64,
        # Send each heartbeat within a second, so a cancelled run reaches its running call quickly.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        # A run whose worker died moves to another worker after this (default 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
    )


async def main() -> None:
    """Run the worker until SIGINT or SIGTERM, then finish the running tasks and stop."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = TemporalSettings()
    client = await connect(settings.address, settings.namespace)
    await ensure_search_attributes(client)
    activities = ActionActivities(ActivitySettings())
    expressions.check("true")  # cel-python loads its grammar on the first compile: here, not in a run
    worker = build_worker(client, settings.task_queue, activities)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("polling %s on %s, namespace %s", settings.task_queue, settings.address, settings.namespace)
    async with worker:
        await stop.wait()
    await activities.aclose()


if __name__ == "__main__":
    asyncio.run(main())
