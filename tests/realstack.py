"""One real stack for the routine tests, for the whole session: nothing of ours stood in.

The Temporal dev server (tests/conftest.py's `temporal_env`), two api processes (uvicorn) on one
SQLite file that start runs on the session's task queue, a node (bwrap VMs) with the echo tool
published as calls.stack publishes it (`echo` priced, `pricey` at 1 USD, `free`), the egress proxy in
front of HTTPS stand-ins of the declarative packs' hosts (the only fakes: the internet), and a routine
worker process (`python -m engine.worker`) that polls that queue and calls the first api.

Helpers: `RoutineStack.api(...)` for HTTP to the api, `store`/`start_run`/`final` for the runs
API, `history` for a run's Temporal history, `start_worker` for more worker processes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import loopback
import pytest
from calls.stack import ECHO, FREE, PRICEY, Org, Proc, Stack, publish_echo_variants, publish_http_packs
from sqlmodel import Session, col, select
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from workers import PATIENCE_S

from api.calls.tables import ActionCall, IdempotencyRecord
from api.db import make_engine
from api.runs import grants
from node.vm import mounts

ECHO_REF = f"{ECHO}/echo@1"
FAIL_REF = f"{ECHO}/fail@1"
FREE_ECHO = f"{FREE}/echo@1"
FREE_FAIL = f"{FREE}/fail@1"
RUNNER_SCOPES = ("routines:run", "routines:read", "actions:call", "usage:read")


@dataclass
class RoutineStack(Stack):
    """calls.stack's Stack whose api processes start runs on `queue` of the Temporal at `temporal`."""

    temporal: str = ""
    namespace: str = "default"
    queue: str = ""
    client: Client | None = None
    worker: Proc | None = None
    workers: list[Proc] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = super().env(
            B3OS_TEMPORAL_ADDRESS=self.temporal,
            B3OS_TEMPORAL_NAMESPACE=self.namespace,
            B3OS_TEMPORAL_TASK_QUEUE=self.queue,
            B3OS_TEMPORAL_BUSY_TASK_QUEUE=self.busy_queue,
        )
        env.update(extra)
        return env

    @property
    def busy_queue(self) -> str:
        """The busy lane's task queue of the stack's api processes (api.runs.lanes): no worker of the
        session's stack polls it, so they start every run on `queue`; `start_worker(queue=...)` one."""
        return f"{self.queue}-busy"

    @property
    def temporal_client(self) -> Client:
        assert self.client is not None
        return self.client

    def start_worker(
        self,
        *,
        queue: str | None = None,
        name: str = "worker",
        api_url: str | None = None,
        program: Sequence[str] = ("-m", "engine.worker"),
        nice: int = 0,
        **env_extra: str,
    ) -> Proc:
        """A routine worker process polling `queue` (the session's by default), calling `api_url` (the first
        api by default); `program`: what Python runs, `nice`: its nice value (as `b3os dev` starts the busy
        lane's worker), `env_extra`: more environment variables."""
        env = self.env(
            B3OS_API_URL=api_url or self.url, B3OS_TEMPORAL_TASK_QUEUE=queue or self.queue, **env_extra
        )
        argv = ["nice", "-n", str(nice), sys.executable, *program] if nice else [sys.executable, *program]
        proc = self.start(f"{name}-{uuid.uuid4().hex[:6]}", argv, env)
        self.wait_polling(proc)
        return proc

    @staticmethod
    def wait_polling(proc: Proc) -> None:
        """Wait until a worker process polls its task queue."""
        deadline = time.monotonic() + PATIENCE_S
        while b"polling" not in proc.log.read_bytes():
            if proc.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker did not start:\n{proc.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def runner(self) -> Org:
        """A fresh organization with a key that may store and run routines."""
        return self.org(scopes=RUNNER_SCOPES)

    # --- the runs API over HTTP -----------------------------------------------------------------

    async def store(self, org: Org, source: str, *, url: str | None = None) -> httpx.Response:
        # a hang guard: a check may take its CPU time's 12 times on the clock, after the organization's
        # earlier stores (api.checker)
        async with loopback.async_client(base_url=url or self.url, timeout=300) as http:
            return await http.post("/v1/routines", json={"yaml": source}, headers=org.headers)

    async def start_run(
        self, org: Org, name: str, inputs: dict[str, Any] | None = None, *, url: str | None = None
    ) -> str:
        """Start a run of a stored routine; its run id."""
        async with loopback.async_client(base_url=url or self.url, timeout=30) as http:
            r = await http.post(
                f"/v1/routines/{name}/runs", json={"inputs": inputs or {}}, headers=org.headers
            )
        assert r.status_code == 201, r.text
        run_id: str = r.json()["run_id"]
        return run_id

    async def run(self, org: Org, source: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store a routine, run it, and return the finished run as GET /v1/runs/{id} answers it."""
        stored = await self.store(org, source)
        assert stored.status_code == 201, stored.text
        run_id = await self.start_run(org, stored.json()["name"], inputs)
        return await self.final(org, run_id)

    async def read(
        self, org: Org, run_id: str, *, url: str | None = None, wait_s: float = 0
    ) -> dict[str, Any]:
        r = await self._get_run(org, run_id, url=url, wait_s=wait_s)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def _get_run(self, org: Org, run_id: str, *, url: str | None, wait_s: float) -> httpx.Response:
        async with loopback.async_client(base_url=url or self.url, timeout=30 + wait_s) as http:
            return await http.get(f"/v1/runs/{run_id}", headers=org.headers, params={"wait_s": wait_s})

    async def final(
        self, org: Org, run_id: str, *, url: str | None = None, timeout_s: float = 60
    ) -> dict[str, Any]:
        """Read GET /v1/runs/{id}, each read waiting up to 5 s for its end, until the run has ended."""
        deadline = time.monotonic() + timeout_s
        while True:
            asked = time.monotonic()
            r = await self._get_run(org, run_id, url=url, wait_s=min(5.0, max(0.0, deadline - asked)))
            if r.status_code == 503:  # Temporal busy with the run's workflow task: wait as the answer says
                assert time.monotonic() < deadline, r.text
                await asyncio.sleep(float(r.headers["Retry-After"]))
                continue
            assert r.status_code == 200, r.text
            run: dict[str, Any] = r.json()
            if run["status"] != "running":
                return run
            assert time.monotonic() < deadline, f"run {run_id} still running: {run}"
            await asyncio.sleep(max(0.0, asked + 0.1 - time.monotonic()))  # at most 10 reads a second

    async def history(self, workflow_id: str) -> list[HistoryEvent]:
        """The run's Temporal history events."""
        handle = self.temporal_client.get_workflow_handle(workflow_id)
        return [event async for event in handle.fetch_history_events()]

    # --- the database ---------------------------------------------------------------------------

    def calls_of(self, org: Org) -> list[ActionCall]:
        """Every tool call of an organization, oldest first."""
        with Session(self.engine) as session:
            stmt = (
                select(ActionCall)
                .where(col(ActionCall.org_id) == org.org_id)
                .order_by(col(ActionCall.started_at))
            )
            return list(session.exec(stmt).all())

    def grant(self, org: Org, *, workflow_id: str = "test", lasts_s: float = 3600) -> str:
        """A grant as the api mints one when it starts a run, here for `workflow_id` (ActivityEnvironment's
        workflow is "test"); `lasts_s` below -60 gives one that has already expired."""
        with Session(self.engine) as session:
            secret = grants.mint(
                session,
                run_id=f"run_{uuid.uuid4().hex[:20]}",
                org_id=org.org_id,
                key_id=org.key_id,
                workflow_id=workflow_id,
                lasts=dt.timedelta(seconds=lasts_s),
            )
            session.commit()
        return secret

    def stored_keys(self, org: Org) -> dict[str, str | None]:
        """Idempotency-Key -> the call id its stored answer came from, for an organization."""
        with Session(self.engine) as session:
            rows = session.exec(select(IdempotencyRecord).where(col(IdempotencyRecord.org_id) == org.org_id))
            return {r.key: r.call_id for r in rows}


def start_routine_stack(root: Path, env: WorkflowEnvironment) -> RoutineStack:
    """Start api x2, a node and a worker; publish echo, pricey and free; wait for the node to install them."""
    os.chmod(root, 0o711)  # the VM's user must reach the node's run dir below it
    (root / "state").mkdir(parents=True)
    db_url = f"sqlite:///{root / 'state' / 'b3os.db'}"
    stack = RoutineStack(
        root=root,
        db_url=db_url,
        engine=make_engine(db_url),
        temporal=env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        queue=f"test-routines-{uuid.uuid4().hex[:8]}",
        client=env.client,
    )
    try:
        stack.start_egress()
        stack.start_api()
        stack.start_api()
        publish_echo_variants(stack)
        publish_http_packs(stack)
        stack.start_node("node-a")
        stack.worker = stack.start_worker()
        stack.wait_installed("node-a", [f"{p}@1.0.0" for p in (ECHO, PRICEY, FREE)])
        return stack
    except BaseException:
        stack.stop()
        raise


@pytest.fixture(scope="session")
def routine_stack(temporal_env: WorkflowEnvironment) -> Iterator[RoutineStack]:
    """The session's one real stack (see the module docstring)."""
    root = Path(tempfile.mkdtemp(prefix="b3os-routines-"))
    stack = start_routine_stack(root, temporal_env)
    yield stack
    stack.stop()  # SIGTERM: each node removes its VMs' mounts, cgroups and directories
    assert stack.worker is not None
    no_traceback([stack.worker])  # a step's failure is one log line, never a traceback
    assert mounts.mounts_under(root) == [], "a node left mounts behind"
    shutil.rmtree(root)


def no_traceback(procs: Sequence[Proc]) -> None:
    """Assert that none of these processes logged a traceback."""
    for proc in procs:
        assert b"Traceback" not in proc.log.read_bytes(), proc.log.read_text()[-3000:]
