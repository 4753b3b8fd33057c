"""Helpers of the node tests: tool packs, installs into the cache, call builders, requests with the api's
proof (node.credential)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import loopback
from workers import PATIENCE_S, TEST_VM_UID_BASE

from node.cache import InstallCache
from node.credential import call_key, signed_headers
from node.models import NodeCall
from node.vm import mounts
from node.vm.bwrap import BwrapDriver
from packs.archive import build_archive

REPO = Path(__file__).resolve().parents[2]
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool"
HOSTILE = Path(__file__).resolve().parent / "tools"
ECHO = "com.example.tools/echo"
VERSION = "1.0.0"
# The host uids of the test VMs: ones no other process uses, so a leftover process is easy to find, and this
# test worker's own (tests/workers.py). The session's driver takes those from VM_UID_BASE, the nodes the tests
# start those from NODE_UID_BASE.
VM_UID_BASE = TEST_VM_UID_BASE
NODE_UID_BASE = VM_UID_BASE + 16
VM_UIDS = range(VM_UID_BASE, VM_UID_BASE + 64)
NODE_ID = "node-under-test"
NODE_SECRET = "b3n_" + "nodeTestSecret" * 3 + "ab"
NODE_ENV = {"B3OS_NODE_ID": NODE_ID, "B3OS_NODE_CREDENTIAL": NODE_SECRET}


def node_request(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    secret: str = NODE_SECRET,
    node_id: str = NODE_ID,
    timeout: float = 30,
) -> httpx.Response:
    """A request to a node with the api's proof (as the api signs it), for `node_id` with `secret`."""
    content = b"" if body is None else json.dumps(body).encode()
    path = urlsplit(url).path
    headers = signed_headers(call_key(secret), node_id=node_id, method=method, path=path, body=content)
    return loopback.request(method, url, content=content, headers=headers, timeout=timeout)


def install_tree(cache: InstallCache, pack: str, tree: Path, version: str = VERSION) -> Path:
    """Install a tool tree into the cache the way sync does: through its deterministic archive."""
    data, stats = build_archive(tree)
    return cache.install_archive(
        pack, version, data, fmt="tar", max_unpacked_bytes=stats.unpacked_bytes, max_entries=stats.entries
    )


def echo_call(action: str, input_: dict[str, Any], *, timeout_ms: int = 10_000, **kw: Any) -> NodeCall:
    """A call of one action of the echo tool."""
    return NodeCall(
        call_id=f"tcall_{action}_{time.monotonic_ns()}",
        pack=ECHO,
        version=VERSION,
        action=action,
        cmd=["/tool/bin/echo-tool", action],
        timeout_ms=timeout_ms,
        input=input_,
        file_fields=["file"] if "file" in input_ else [],
        **kw,
    )


def hostile_call(name: str, input_: dict[str, Any] | None = None, *, timeout_ms: int = 10_000) -> NodeCall:
    """A call of one of the hostile tools under tests/node/tools (command /tool/run)."""
    return NodeCall(
        call_id=f"tcall_{name}_{time.monotonic_ns()}",
        pack=f"com.example.hostile/{name}",
        version=VERSION,
        action="run",
        cmd=["/tool/run"],
        timeout_ms=timeout_ms,
        input=input_ or {},
    )


def _status(pid: str) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def vm_processes(driver: BwrapDriver | None = None) -> list[int]:
    """Processes of this test process's VMs: running as the test VMs' host uid and descended from this
    process (the driver runs here and is its VMs' subreaper) or sitting in `driver`'s cgroups. Another
    test run's VMs on this machine are not counted."""
    parents: dict[int, int] = {}
    vm_uid: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        status = _status(entry.name)
        if not status:
            continue
        parents[int(entry.name)] = int(status.get("PPid", "0"))
        uid = status.get("Uid", "").split()[:1]
        if uid and int(uid[0]) in VM_UIDS:
            vm_uid.add(int(entry.name))
    me = os.getpid()
    found = set()
    for pid in vm_uid:
        seen, cur = 0, pid
        while cur > 1 and seen < 64:
            cur, seen = parents.get(cur, 0), seen + 1
            if cur == me:
                found.add(pid)
                break
    if driver is not None:
        for name in driver.cgroups.children():
            for path in {p / name for p in driver.cgroups.dirs.values()}:
                with contextlib.suppress(OSError):
                    found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
    return sorted(found)


def cmdline(pid: int) -> str:
    """A process's command line, its arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _vm_of(pid: int) -> str:
    """The VM a process runs in (its cgroup's name, `vm-...`), "" when none."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return ""
    return next((n for line in lines if (n := line.rsplit("/", 1)[-1]).startswith("vm-")), "")


def wait_running(text: str, *, vms: int = 1, timeout_s: float = PATIENCE_S) -> bool:
    """Wait until `vms` VMs of this process run a process whose command line holds `text`.

    Returns:
        True once they do, False when they did not within `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        running = {_vm_of(pid) for pid in vm_processes() if text in cmdline(pid)} - {""}
        if len(running) >= vms:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def wait_started(driver: BwrapDriver, text: str, *, vms: int, timeout_s: float = PATIENCE_S) -> bool:
    """Wait until `vms` VMs of `driver` have run a process whose command line holds `text`, together or one
    after another (a tool that fails fast may end before the next one starts). Only the VMs' cgroups are
    read, not all of /proc: the VMs come before this process for the CPU, and a slow look can miss a tool
    that lives 0.3 s."""
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while len(seen) < vms:
        for name in driver.cgroups.children():
            with contextlib.suppress(OSError):
                procs = (driver.cgroups.dirs["pids"] / name / "cgroup.procs").read_text().split()
                if any(text in cmdline(int(pid)) for pid in procs):
                    seen.add(name)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def leftovers(driver: BwrapDriver) -> list[str]:
    """What calls left behind: processes, cgroups, mounts or directories beyond the prepared pool."""
    prepared = set(driver.settle())
    pooled = driver.pool_pids()
    problems = [f"process {pid}" for pid in vm_processes(driver) if pid not in pooled]
    problems += [f"cgroup {name}" for name in set(driver.cgroups.children()) - prepared]
    own = prepared | {"base", "launcher", "nsroot", "empty", "over", "blank"}
    problems += [f"directory {p.name}" for p in driver.node_dir.iterdir() if p.name not in own]
    problems += [
        f"mount {m}"
        for m in mounts.mounts_under(driver.node_dir)
        if m not in (driver.node_dir, *(driver.node_dir / d for d in ("base", "launcher", "blank")))
        and m.parent.name not in prepared
    ]
    return problems
