"""Calls of one tenant share one VM's CPU weight on the node, in their VMs' real cgroups; the VMs together
come before the host's other work, within a cap that leaves the host its reserve."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodetest import REPO, echo_call, hostile_call, leftovers, wait_running
from workers import PATIENCE_S

from node.cache import InstallCache
from node.models import NodeCall, NodeCallResult
from node.runner import Runner
from node.vm.bwrap import BwrapDriver
from node.vm.cgroups import FULL_SHARE, CallCgroup, NodeCgroups
from node.vm.host_share import HostShare


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _sleep(seconds: float, tenant: str | None) -> NodeCall:
    return echo_call("fail", {"mode": "sleep", "seconds": seconds}, timeout_ms=20_000, tenant=tenant)


@contextlib.contextmanager
def _calling(
    runner: Runner, calls: list[NodeCall]
) -> Iterator[tuple[list[threading.Thread], list[NodeCallResult]]]:
    """The calls made at once, each in a thread of its own: the threads and the results as they come; every
    thread is waited for on the way out."""
    results: list[NodeCallResult] = []
    threads = [threading.Thread(target=lambda c=c: results.append(runner.call(c))) for c in calls]
    for thread in threads:
        thread.start()
    try:
        yield threads, results
    finally:
        for thread in threads:
            thread.join(timeout=30)


def _weights(driver: BwrapDriver) -> list[int]:
    """The CPU weight of every live VM group of the node now (the prepared ones' too), smallest first; a group
    made or removed meanwhile (the pool's), or whose VM has ended and waits for the remover, is left out."""
    name = FULL_SHARE[driver.cgroups.version][0]
    cpu, pids = driver.cgroups.dirs["cpu"], driver.cgroups.dirs["pids"]
    weights = []
    for child in driver.cgroups.children():
        with contextlib.suppress(OSError, ValueError):
            if (pids / child / "cgroup.procs").read_text().split():
                weights.append(int((cpu / child / name).read_text()))
    return sorted(weights)


def test_each_of_a_tenants_running_vms_weighs_one_over_how_many_it_runs(
    runner: Runner, driver: BwrapDriver
) -> None:
    _, full, _, _ = FULL_SHARE[driver.cgroups.version]
    # long sleeps: org-a's first call ends when it is cancelled, never on the clock of a busy machine
    calls = [_sleep(30, "org-a"), _sleep(30, "org-a"), _sleep(30, "org-b"), _sleep(30, None)]
    with _calling(runner, calls) as (threads, results):
        try:
            assert wait_running("sleep 30 ", vms=4), "the calls did not start in their VMs"
            weights = _weights(driver)
            assert weights.count(full // 2) == 2, weights  # org-a's two; org-b's and the untenanted one whole
            assert all(w in (full // 2, full) for w in weights), weights
            assert runner.cancel(calls[0].call_id) == "killed"
            threads[0].join(timeout=PATIENCE_S)
            assert wait_running("sleep 30 ", vms=3, timeout_s=0)
            assert _weights(driver).count(full // 2) == 0  # org-a's other call weighs a whole VM again
        finally:
            for call in calls[1:]:
                runner.cancel(call.call_id)
    assert len(results) == 4, results
    assert [r.ok for r in results] == [False] * 4, [r.error for r in results]  # every one was cancelled


def test_a_tenant_is_a_plain_name() -> None:
    with pytest.raises(ValueError, match="tenant"):
        _sleep(0, "../../cpu")


def test_the_vms_weigh_more_than_the_hosts_other_work_but_leave_it_its_reserve(
    runner: Runner, driver: BwrapDriver
) -> None:
    name, full, _, _ = FULL_SHARE[driver.cgroups.version]
    share = HostShare()
    assert int((driver.cgroups.dirs["cpu"] / name).read_text()) == round(full * share.weight)
    cap = share.cap_cpus()
    assert cap is not None and cap < len(os.sched_getaffinity(0))
    # two tenants' tools, each spinning two processes: they would take every CPU of the host
    calls = [hostile_call("spin", timeout_ms=3000).model_copy(update={"tenant": t}) for t in ("a", "b")]
    with _calling(runner, calls) as (_, results):
        assert wait_running("/tool/run", vms=2), "the tools did not start"
        began, used = time.monotonic(), driver.cgroups.cpu_ns()
        time.sleep(1.0)
        cpus = (driver.cgroups.cpu_ns() - used) / 1e9 / (time.monotonic() - began)
        assert cpus <= cap * 1.1, f"the VMs used {cpus:.2f} CPUs, more than their {cap:.2f}"
    assert [r.error.code if r.error else None for r in results] == ["tool_timed_out"] * 2


def test_a_node_in_a_group_with_a_cpu_quota_caps_its_vms_within_it() -> None:
    # a container started with --cpus 0.8: its group's quota is below the host's CPUs, and the kernel
    # refuses a child's quota above its parent's (v1)
    parent = NodeCgroups.open(f"b3os-test-container-{os.getpid()}")
    container = CallCgroup(parent.version, parent.dirs)
    try:
        if parent.version == 1:
            (parent.dirs["cpu"] / "cpu.cfs_quota_us").write_text("80000")
        else:
            (parent.dirs["cpu"] / "cpu.max").write_text("80000 100000")
        argv = [sys.executable, "-c", _NODE_IN_CONTAINER]
        node = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        container.add(node.pid)
        out, _ = node.communicate("go\n", timeout=30)
        assert node.returncode == 0, out
        weight = round(FULL_SHARE[parent.version][1] * HostShare().weight)
        assert json.loads(out) == {"above": 0.8, "cap": 0.3, "weight": weight}
    finally:
        container.remove()


_NODE_IN_CONTAINER = """
import json, os, sys
from node.vm.host_share import HostShare
from node.vm.cgroups import FULL_SHARE, NodeCgroups
sys.stdin.readline()  # moved into the container's group meanwhile
node = NodeCgroups.open(f"b3os-node-{os.getpid()}")
try:
    above = node.cpus_above()
    node.weigh(HostShare().weight, HostShare().cap_cpus(above))
    cpu = node.dirs["cpu"]
    if node.version == 1:
        quota = int((cpu / "cpu.cfs_quota_us").read_text()) / int((cpu / "cpu.cfs_period_us").read_text())
    else:
        q, p = (cpu / "cpu.max").read_text().split()
        quota = int(q) / int(p)
    weight = int((cpu / FULL_SHARE[node.version][0]).read_text())
    print(json.dumps({"above": above, "cap": round(quota, 3), "weight": weight}))
finally:
    node.remove()
"""


def test_a_reserve_that_leaves_the_vms_no_cpu_is_refused_with_the_setting_named() -> None:
    cpus = len(os.sched_getaffinity(0))
    with pytest.raises(
        ValueError, match=rf"B3OS_HOST_RESERVE_CPUS={cpus} leaves the VMs no CPU of the {cpus} here"
    ):
        HostShare(reserve_cpus=cpus).cap_cpus()
    assert HostShare(reserve_cpus=0.5).cap_cpus(above=0.8) == pytest.approx(0.3)
    assert HostShare(reserve_cpus=0).cap_cpus() is None


def test_a_node_whose_vms_cap_is_below_one_vms_vcpu_still_runs_calls(
    base_rootfs: Path, run_dir: Path, cache: InstallCache
) -> None:
    # a host of one CPU: the VMs' cap (the CPU less the reserve) is half a VM's vCPU, and on v1 the kernel
    # refuses a VM's quota above its parent's; a node process of its own (its own cgroup)
    reserve = len(os.sched_getaffinity(0)) - 0.5
    argv = [
        sys.executable,
        "-c",
        _NODE_OF_ONE_CPU,
        str(base_rootfs),
        str(run_dir),
        str(cache.root),
        str(reserve),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ok": True, "output": {"text": "hi"}, "vm_cpus": 0.5}


_NODE_OF_ONE_CPU = """
import contextlib, json, sys, time
from pathlib import Path
sys.path[:0] = ["tests", "tests/node"]
from nodetest import VM_UID_BASE, echo_call
from node.cache import InstallCache
from node.runner import Runner
from node.vm.bwrap import BwrapDriver
from node.vm.host_share import HostShare

base, run_dir, cache, reserve = sys.argv[1:]
driver = BwrapDriver(base_rootfs=Path(base), run_dir=Path(run_dir), pool_size=1, slots=1,
                     uid_base=VM_UID_BASE + 32, host_share=HostShare(reserve_cpus=float(reserve)))
try:
    result = Runner(driver, InstallCache(Path(cache))).call(echo_call("echo", {"text": "hi"}))
    quota, end = None, time.monotonic() + 60
    while quota is None and time.monotonic() < end:  # the pool's next VM (the call's may be gone)
        for vm in driver.cgroups.children():
            group = driver.cgroups.dirs["cpu"] / vm
            with contextlib.suppress(OSError, ValueError):
                if driver.cgroups.version == 1:
                    q, p = ((group / name).read_text() for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
                else:
                    q, p = (group / "cpu.max").read_text().split()
                quota = int(q) / int(p)
        time.sleep(0.05)
    print(json.dumps({"ok": result.ok, "output": result.output, "vm_cpus": quota and round(quota, 3)}))
finally:
    driver.close()
"""
