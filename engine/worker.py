"""The routine worker: `python -m engine.worker` (also started by `b3os dev`).

Connects to Temporal (`B3OS_TEMPORAL_ADDRESS`, `B3OS_TEMPORAL_NAMESPACE`; over TLS or mTLS with
`B3OS_TEMPORAL_TLS_*`, docs/operations.md), makes sure the search
attributes `B3osRoutine`, `B3osOrg`, `B3osRerunOf` and `B3osSchedule` exist, and polls the task queue
`b3os-routines` (override: `B3OS_TEMPORAL_TASK_QUEUE`) with the routine workflow and the `call_action`
activity, and the schedule tick workflow (engine.schedule_workflow) and its activities, holding at most
`B3OS_TEMPORAL_WORKFLOW_TASKS` (4) workflow tasks at once (docs/routines.md, Fairness). The activity
settings (`B3OS_API_URL`, `B3OS_WORKER_TOKEN`) stay in this process.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, TLSConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from activities.schedule_run import ScheduleActivities
from engine import expressions
from engine.converter import DATA_CONVERTER
from engine.foreach import ForeachWorkflow
from engine.poll_workflow import TriggerPollWorkflow
from engine.runs import ROUTINES_TASK_QUEUE, SEARCH_ATTRIBUTES
from engine.schedule_workflow import ScheduleTickWorkflow
from engine.stuck import HUNG_S, GuardedRunner, StuckRuns
from engine.workflow import RoutineWorkflow
from telemetry import arenas, interpreter, logs, tracing
from telemetry.config import TelemetrySettings

__all__ = [
    "ROUTINES_TASK_QUEUE",
    "TemporalSettings",
    "build_worker",
    "connect",
    "ensure_search_attributes",
    "tls_config",
    "workflow_runner",
]

log = logging.getLogger("b3os.worker")

PASSED_THROUGH = ("engine.workflow", "engine.foreach")
"""Workflow modules the worker's sandbox takes from the worker as they are, instead of importing them again
for every run (see `workflow_runner`)."""

SHUTDOWN_S = 10.0
"""How long a stopping worker waits for its tasks and polls to end (`B3OS_TEMPORAL_SHUTDOWN_S`); past it (a
workflow task stuck in C holds its slot, engine.stuck) it exits regardless."""

EXIT_LOST_SLOT = 3
"""The worker's exit status when it stopped because a workflow task slot would not come back
(engine.stuck): its supervisor starts it again with every slot free."""

WORKFLOW_TASKS = 4
"""Workflow tasks a worker holds at once (`B3OS_TEMPORAL_WORKFLOW_TASKS`; at least 2: one sticky poll and
one on the shared queue). Tasks past it wait at the server, where the runs' priority orders them."""


class TemporalSettings(BaseSettings):
    """Where the Temporal server is (env prefix `B3OS_TEMPORAL_`)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_TEMPORAL_", extra="ignore")

    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = ROUTINES_TASK_QUEUE
    tls: bool = False
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_server_name: str | None = None
    workflow_tasks: int = Field(default=WORKFLOW_TASKS, ge=2)
    hung_task_s: float = Field(default=HUNG_S, ge=3)
    shutdown_s: float = Field(default=SHUTDOWN_S, gt=0)

    def tls_config(self) -> TLSConfig | None:
        """The client's TLS settings, or None for plaintext (see `tls_config`)."""
        return tls_config(
            enabled=self.tls,
            ca_file=self.tls_ca_file,
            cert_file=self.tls_cert_file,
            key_file=self.tls_key_file,
            server_name=self.tls_server_name,
        )


def tls_config(
    *,
    enabled: bool,
    ca_file: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    server_name: str | None,
) -> TLSConfig | None:
    """TLS to the Temporal frontend (`B3OS_TEMPORAL_TLS_*`): on when `enabled` or any file is given.

    Args:
        enabled: TLS with the system's roots even when no file is given.
        ca_file: PEM of the CA that signed the frontend's certificate (default: the system's roots).
        cert_file: This process's client certificate (PEM), for mTLS; goes with `key_file`.
        key_file: Its private key (PEM).
        server_name: The name to check the frontend's certificate against (default: the address's host).

    Returns:
        The TLS configuration, or None for plaintext.

    Raises:
        ValueError: only one of the certificate and its key is given, or a file cannot be read.
    """
    if not (enabled or ca_file or cert_file or key_file):
        return None
    if (cert_file is None) != (key_file is None):
        raise ValueError(
            "B3OS_TEMPORAL_TLS_CERT_FILE and B3OS_TEMPORAL_TLS_KEY_FILE go together: "
            "set both for mTLS, or neither"
        )

    def read(path: Path | None) -> bytes | None:
        try:
            return path.read_bytes() if path is not None else None
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None

    return TLSConfig(
        server_root_ca_cert=read(ca_file),
        client_cert=read(cert_file),
        client_private_key=read(key_file),
        domain=server_name or None,
    )


async def connect(
    address: str, namespace: str = "default", tls: TLSConfig | None = None, *, runtime: Runtime | None = None
) -> Client:
    """A Temporal client with the data converter every b3os process uses (engine.converter).

    With tracing on (telemetry.tracing), the client carries temporalio's TracingInterceptor: a workflow
    started with it, its activities and what they call are one trace (a worker built on the client
    uses the interceptor too).

    Args:
        address: host:port of the Temporal frontend.
        namespace: The Temporal namespace.
        tls: TLS (and the client certificate for mTLS) to the frontend; None: plaintext.
        runtime: The Temporal runtime (the worker's carries its Prometheus metrics); None: the default.

    Returns:
        The connected client.
    """
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=DATA_CONVERTER,
        tls=tls or False,
        interceptors=tracing.temporal_interceptors(),
        runtime=runtime,
    )


def metrics_runtime(address: str) -> Runtime | None:
    """A Temporal runtime serving the SDK's metrics (`b3os_temporal_*`) at `address` for Prometheus.

    Args:
        address: host:port to listen on (`B3OS_WORKER_METRICS_ADDRESS`); empty: None (no metrics).
    """
    if not address:
        return None
    prometheus = PrometheusConfig(bind_address=address, counters_total_suffix=True, durations_as_seconds=True)
    return Runtime(telemetry=TelemetryConfig(metrics=prometheus, metric_prefix="b3os_temporal_"))


async def ensure_search_attributes(client: Client) -> None:
    """Register the keyword search attributes of engine.runs.SEARCH_ATTRIBUTES when they are missing.

    A server that refuses (no operator rights) is logged, not fatal: runs then start without them.
    """
    ns = client.namespace
    try:
        have = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=ns))
        missing = {
            name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
            for name in SEARCH_ATTRIBUTES
            if name not in have.custom_attributes
        }
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=ns, search_attributes=missing)
            )
            log.info("registered search attributes %s", ", ".join(sorted(missing)))
    except RPCError as exc:
        log.warning("could not register the search attributes: %s", exc.message)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox the worker runs workflows in: the default restrictions, `PASSED_THROUGH` passed through.

    The sandbox imports a workflow's module again for every run, to keep one run's module state from
    another; `engine.workflow` holds none (constants, functions and the workflow class; every module it
    imports is passed through already), and that import (the module's body and `@workflow.defn` on
    its class) was the larger part of the worker's work in a run's first workflow task: 2.4 ms of
    every new run, and of every replay after an eviction (docs/performance.md). Each run still gets its
    own instance, the sandbox's builtins (`open` and the like are refused) and its deadlock detection.
    What the module's own code no longer has are the sandbox's restricted stdlib proxies (a
    `datetime.now()` in engine/workflow.py is not refused by the worker), as for the modules it imports;
    tests/engine/test_history_replay.py replays every recorded history in the default sandbox too,
    which refuses them.
    """
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


def build_worker(
    client: Client,
    task_queue: str,
    activities: ActionActivities,
    ticks: ScheduleActivities | None = None,
    *,
    workflow_tasks: int = WORKFLOW_TASKS,
    stuck: StuckRuns | None = None,
) -> Worker:
    """The worker that runs routine workflows and step activities on one task queue.

    Args:
        client: A client made by `connect`.
        task_queue: The task queue to poll (`ROUTINES_TASK_QUEUE` outside tests).
        activities: The step activities, holding the worker's api settings.
        ticks: The schedule tick's activities (None: the worker runs no tick's activities).
        workflow_tasks: Workflow tasks held at once (`WORKFLOW_TASKS`).
        stuck: Told how each workflow activation went (engine.stuck); None: no one is.

    Returns:
        A worker to `run()` or use as an async context manager.
    """
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RoutineWorkflow, ForeachWorkflow, ScheduleTickWorkflow, TriggerPollWorkflow],
        workflow_runner=workflow_runner() if stuck is None else GuardedRunner(workflow_runner(), stuck),
        activities=[activities.call_action, *_tick_activities(ticks)],
        max_concurrent_workflow_tasks=workflow_tasks,
        max_concurrent_activities=64,
        # Send each heartbeat within a second, so a cancelled run reaches its running call quickly.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
        # A run whose worker died moves to another worker after this (default 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
    )


def _tick_activities(ticks: ScheduleActivities | None) -> list[Callable[..., Any]]:
    return [] if ticks is None else [ticks.start_scheduled_run, ticks.wait_run_ended, ticks.poll_trigger]


async def main() -> int:
    """Run the worker until SIGINT or SIGTERM, or until a slot is lost (engine.stuck), then finish the
    running tasks and stop (within `shutdown_s`); the exit status: 0, or `EXIT_LOST_SLOT`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    telemetry = TelemetrySettings()
    tracing.setup("worker", telemetry)
    logs.install()
    settings = TemporalSettings()
    try:
        tls = settings.tls_config()
    except ValueError as exc:
        raise SystemExit(f"b3os worker: the Temporal TLS settings are wrong: {exc}") from None
    try:
        runtime = metrics_runtime(telemetry.worker_metrics_address)
    except Exception as exc:  # a bad address or a port in use: say which, do not start half-observed
        where = telemetry.worker_metrics_address
        raise SystemExit(f"b3os worker: cannot serve metrics at {where}: {exc}") from None
    client = await connect(settings.address, settings.namespace, tls, runtime=runtime)
    await ensure_search_attributes(client)
    activity_settings = ActivitySettings()
    activities = ActionActivities(activity_settings)
    expressions.check("true")  # cel-python loads its grammar on the first compile: here, not in a run
    stop = asyncio.Event()
    gave_up: list[str] = []

    def give_up(why: str) -> None:
        log.error("b3os worker: stopping, to be started again: %s", why)
        gave_up.append(why)
        stop.set()

    loop = asyncio.get_running_loop()
    stuck = StuckRuns(client, loop, give_up, hung_s=settings.hung_task_s)
    worker = build_worker(
        client,
        settings.task_queue,
        activities,
        ScheduleActivities(activity_settings, client),
        workflow_tasks=settings.workflow_tasks,
        stuck=stuck,
    )
    interpreter.hand_over_often()
    gc.collect()  # the startup heap frozen out of the collector: its full collections held workflow tasks
    gc.freeze()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if runtime is not None:
        log.info("Temporal SDK metrics at http://%s/metrics", telemetry.worker_metrics_address)
    log.info("polling %s on %s, namespace %s", settings.task_queue, settings.address, settings.namespace)
    watching = loop.create_task(stuck.watch())
    trimming = loop.create_task(arenas.giving_back())  # memory freed after a burst back to the system
    async with worker:
        await stop.wait()
        code = EXIT_LOST_SLOT if gave_up else 0
        deadline = _exit_after(settings.shutdown_s, code, stuck.holding)
        watching.cancel()
        trimming.cancel()
    await activities.aclose()
    deadline.cancel()
    return code


def _exit_after(seconds: float, code: int, holding: Callable[[], bool]) -> threading.Timer:
    """End the process in `seconds` unless cancelled (a thread of its own: the event loop may be what is
    stuck): with `code`, or 1 when it is 0 and a workflow task still holds its slot (`holding`). With
    none held, what is left is the SDK retrying the eviction of a run this worker ended ("tasks
    remain"), which nothing needs: the stop is clean."""

    def exit_now() -> None:
        held = holding()
        why = "a workflow task holds its slot" if held else "only evictions of ended runs were left"
        log.error("b3os worker: did not stop within %g s (%s): exiting", seconds, why)
        logging.shutdown()
        os._exit(code or int(held))

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()
    return timer


def run() -> None:
    """`python -m engine.worker`: `main`, then the process ends at once with its status. The SDK's native
    threads may still call into Python while the interpreter finalizes, which aborted 1 stop in ~10
    ("PyGILState_Release: thread state ... must be current"): there is nothing left to finalize."""
    code = asyncio.run(main())
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
