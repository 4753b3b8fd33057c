"""Helpers of the call tests: calling the api, reading usage."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from pathlib import Path
from typing import Any

import httpx
import loopback
from sqlmodel import Session, col, func, select
from workers import PATIENCE_S

from activities.idempotency import step_idempotency_key
from api.calls.tables import RUNNING, ActionCall
from api.runs import grants

from .stack import WORKER_TOKEN, Org, Stack


def call(
    stack: Stack,
    org: Org,
    ref: str,
    input_: dict[str, Any] | None = None,
    *,
    url: str | None = None,
    key: str | None = None,
    **extra: Any,
) -> httpx.Response:
    """POST /v1/actions/call, optionally with an Idempotency-Key."""
    headers = dict(org.headers)
    if key is not None:
        headers["Idempotency-Key"] = key
    body: dict[str, Any] = {"ref": ref, "input": input_ or {}, **extra}
    return loopback.post(f"{url or stack.url}/v1/actions/call", headers=headers, json=body, timeout=120)


def step_headers(stack: Stack, org: Org, workflow_id: str, step: str) -> dict[str, str]:
    """The headers a routine step's call sends: the worker token, a grant minted as the api mints one when
    it starts a run (this stack runs no Temporal), the step and its derived Idempotency-Key."""
    with Session(stack.engine) as session:
        grant = grants.mint(
            session,
            run_id="run_" + workflow_id[-20:],
            org_id=org.org_id,
            key_id=org.key_id,
            workflow_id=workflow_id,
            lasts=dt.timedelta(hours=1),
        )
        session.commit()
    return {
        "Authorization": f"Bearer {WORKER_TOKEN}",
        grants.GRANT_HEADER: grant,
        grants.STEP_HEADER: step,
        "Idempotency-Key": step_idempotency_key(workflow_id, step, None),
    }


def error(r: httpx.Response, status: int, code: str, reason: str | None = None) -> dict[str, Any]:
    """The error object of an answer that must have this status, code and reason."""
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] == code, err
    if reason is not None:
        assert err.get("reason") == reason, err
    if status in (429, 503):
        assert int(r.headers["Retry-After"]) >= 1
        assert err["retry_after"] == int(r.headers["Retry-After"])
    return err


def usage(stack: Stack, org: Org) -> dict[str, Any]:
    r = loopback.get(f"{stack.url}/v1/usage", headers=org.headers, timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def running(stack: Stack, org: Org) -> int:
    """How many calls of an organization hold a slot now."""
    with Session(stack.engine) as session:
        count = session.exec(
            select(func.count()).where(col(ActionCall.org_id) == org.org_id, col(ActionCall.state) == RUNNING)
        ).one()
    return int(count)


def _parents() -> dict[int, int]:
    """Every process's parent, from one read of /proc (pid -> ppid)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
    return parents


def vm_processes(stack: Stack) -> dict[int, str]:
    """The processes the stack's processes started (a node's VMs' among them): pid -> command line."""
    own = {p.popen.pid for p in stack.procs if p.popen.poll() is None}
    parents = _parents()
    found = {}
    for pid in parents:
        cur, hops = parents[pid], 0
        while cur > 1 and cur not in own and hops < 64:
            cur, hops = parents.get(cur, 0), hops + 1
        if cur in own:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def vm_commands(stack: Stack) -> list[str]:
    """The command lines of the processes the stack's processes started (a node's VMs' among them)."""
    return list(vm_processes(stack).values())


def wait_vm_command(stack: Stack, text: str, timeout_s: float = PATIENCE_S) -> None:
    """Wait until a process of a node's VM runs a command line holding `text` (such as "sleep 30 ")."""
    deadline = time.monotonic() + timeout_s
    while not any(text in command for command in vm_commands(stack)):
        assert time.monotonic() < deadline, f"no VM ran {text!r} within {timeout_s} s"
        time.sleep(0.02)
