"""The routine tests' stack for a bench: a Temporal dev server (the `temporal` CLI of the venv) keeping its
state in SQLite as `b3os dev` does (engine.temporal_server.durable_args), then
tests/realstack.py's api processes, node and worker, and the busy lane's worker as `b3os dev` starts it,
with the api's own routine admission wait (not the tests' 429-at-once); stopped and its temp dir removed
on the way out."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@asynccontextmanager
async def routine_stack(name: str, *, api_admission_wait: bool = True) -> AsyncIterator[Any]:
    """A started `RoutineStack` under a temp dir named after the bench `name` (`api_admission_wait`: the
    api's own routine admission wait; else the tests')."""
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "egress")]
    import calls.stack
    from realstack import start_routine_stack
    from temporalio.common import SearchAttributeKey
    from temporalio.testing import WorkflowEnvironment

    from cli._embedded import BUSY_WORKER_NICE
    from engine.converter import DATA_CONVERTER
    from engine.temporal_server import dev_server_args, durable_args

    if api_admission_wait:
        calls.stack.ROUTINE_ADMISSION_WAIT_S = None  # the api's default, not the tests' 429-at-once
    temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    root = Path(tempfile.mkdtemp(prefix=f"b3os-bench-{name}-"))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal,
        data_converter=DATA_CONVERTER,
        search_attributes=[SearchAttributeKey.for_keyword(n) for n in ("B3osRoutine", "B3osOrg")],
        dev_server_extra_args=[*durable_args(str(root / "temporal.db")), *dev_server_args()],
    )
    stack = start_routine_stack(root, env)
    try:  # the busy lane's worker, as `b3os dev` starts it (api.runs.lanes)
        stack.start_worker(queue=stack.busy_queue, name="worker-busy", nice=BUSY_WORKER_NICE)
        yield stack
    finally:
        stack.stop()
        await env.shutdown()
        shutil.rmtree(root, ignore_errors=True)
