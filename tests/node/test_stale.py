"""Nodes as processes on a run dir of their own: a node killed with SIGKILL leaves its VMs' mounts,
directories and cgroups, and the next node on the same run dir removes them at start, never what belongs
to a live node; a run dir outside /tmp (the default is /run/b3os/vms) works."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodetest import NODE_ENV, NODE_UID_BASE, REPO, VM_UIDS, echo_call, node_request
from workers import PATIENCE_S, free_port, node_cgroups

from node.cache import InstallCache
from node.vm import mounts


class Node:
    """A `b3os node run` process on a given run dir."""

    def __init__(self, run_dir: Path, cache: InstallCache) -> None:
        self.log = run_dir.parent / f"node-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            **NODE_ENV,
            "B3OS_CACHE_DIR": str(cache.root),
            "B3OS_RUN_DIR": str(run_dir),
            "B3OS_VM_UID_BASE": str(NODE_UID_BASE),
            "B3OS_POOL_SIZE": "2",
        }
        port = self.port = free_port()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "node", "run", "--port", str(port), "--log-level", "info"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.dir = run_dir / f"node-{self.proc.pid}"
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                status = node_request("GET", f"http://127.0.0.1:{port}/v1/node/status")
                if status.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.1)
        deadline = time.monotonic() + PATIENCE_S
        while len(list(self.dir.glob("vm-*"))) < 2:  # its pool is up
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def cgroups(self) -> list[Path]:
        return node_cgroups(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)


@pytest.fixture(params=["/tmp", "/run"])
def run_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="b3os-stale-", dir=request.param))
    os.chmod(root, 0o711)
    path = root / "vms"
    path.mkdir(mode=0o711)
    yield path
    assert mounts.mounts_under(root) == []
    shutil.rmtree(root)


def _reap_orphaned_vms() -> None:
    """Reap the VM processes of a killed node that were orphaned to this process (the session's driver
    makes it the child subreaper) and then killed by the next node: zombies here, not anything a node
    left (tests/node/nodetest.leftovers counts them as a VM's processes)."""
    for entry in Path("/proc").iterdir():
        try:
            status = dict(
                line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line
            )
        except (OSError, ValueError):
            continue
        uid = int(status.get("Uid", "-1").split()[0])
        if (
            status.get("PPid") == str(os.getpid())
            and status.get("State", "").startswith("Z")
            and uid in VM_UIDS
        ):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry.name), os.WNOHANG)


def test_the_next_node_removes_what_a_killed_node_left_and_spares_a_live_one(
    run_dir: Path, cache: InstallCache
) -> None:
    killed = Node(run_dir, cache)
    live = Node(run_dir, cache)
    try:
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait()
        assert mounts.mounts_under(killed.dir) and killed.cgroups()  # what SIGKILL leaves
        after = Node(run_dir, cache)
        try:
            assert not killed.dir.exists() and mounts.mounts_under(killed.dir) == []
            assert killed.cgroups() == []
            assert f"removed what a dead node left: {killed.dir} (" in after.log.read_text()
            assert live.dir.is_dir() and mounts.mounts_under(live.dir) and live.cgroups()  # untouched
        finally:
            after.stop()
        assert not after.dir.exists() and after.cgroups() == []  # SIGTERM: it removed its own
    finally:
        live.stop()
        killed.stop()
        _reap_orphaned_vms()
    assert list(run_dir.iterdir()) == []


def test_a_node_runs_calls_whatever_its_run_dir(run_dir: Path, cache: InstallCache) -> None:
    # bwrap stages each sandbox's root on a tmpfs at /tmp of the namespace VMs are spawned in
    node = Node(run_dir, cache)
    try:
        r = node_request(
            "POST",
            f"http://127.0.0.1:{node.port}/v1/node/calls",
            echo_call("echo", {"text": "hi"}).model_dump(),
        )
        assert (r.status_code, r.json()["ok"], r.json()["output"]) == (200, True, {"text": "hi"})
    finally:
        node.stop()
    assert list(run_dir.iterdir()) == []
