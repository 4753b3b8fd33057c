"""Every error reason of a node call, each produced by a real tool in a real VM."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import shutil
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from nodetest import (
    ECHO,
    ECHO_TOOL,
    VERSION,
    echo_call,
    hostile_call,
    install_tree,
    leftovers,
    vm_processes,
    wait_running,
)
from timeouts import is_timeout_sentence
from workers import PATIENCE_S

from node.cache import InstallCache
from node.models import NodeCallResult
from node.runner import Runner
from node.vm.bwrap import BwrapDriver
from node.vm.bwrap_vm import BwrapVm


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _err(result: NodeCallResult) -> dict:
    assert result.error is not None, result.output
    return result.error.model_dump()


@pytest.mark.parametrize(
    ("ask", "reason", "detail", "message"),
    [
        ({"mode": "exit", "exitCode": 3}, "exit", {"exit_code": 3}, "the tool exited with status 3"),
        (
            {"mode": "signal", "signal": "KILL"},
            "signal",
            {"signal": 9},
            "the tool was killed by signal 9 (SIGKILL)",
        ),
        (
            {"mode": "bad_last_line"},
            "protocol",
            {},
            'the last line of the tool\'s stdout is not one JSON answer ({"output": ...} or {"error": ...})',
        ),
        ({"mode": "bad_file"}, "output_file", {}, "output file /out/missing.txt does not exist"),
        ({"mode": "huge_output"}, "output_too_large", {}, "the tool wrote more than 1048576 bytes to stdout"),
    ],
)
def test_a_tool_that_breaks_the_contract_fails_with_its_reason(
    runner: Runner, ask: dict, reason: str, detail: dict, message: str
) -> None:
    result = runner.call(echo_call("fail", ask))
    err = _err(result)
    assert (err["code"], err["reason"], err["message"]) == ("tool_failed", reason, message)
    assert {k: err[k] for k in detail} == detail
    assert result.ran and result.usage["vcpu_ms"] >= 1


def test_a_tool_past_its_time_is_tool_timed_out_and_ran_as_the_vm_user(runner: Runner) -> None:
    seen: list[bool] = []
    watcher = threading.Thread(target=lambda: seen.append(wait_running("sleep 30 ", timeout_s=5)))
    watcher.start()
    result = runner.call(echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=1000))
    watcher.join()
    err = _err(result)
    assert err["code"] == "tool_timed_out" and is_timeout_sentence(err["message"], 1000)
    assert result.ran and seen == [True], "the tool's processes run as the VM's host uid while it runs"
    assert 900 <= result.timings["run"] < 2000


def test_a_version_that_is_not_installed_is_pack_unavailable(runner: Runner) -> None:
    call = echo_call("noop", {}).model_copy(update={"version": "9.9.9"})
    result = runner.call(call)
    assert (result.ran, _err(result)["code"]) == (False, "pack_unavailable")
    assert _err(result)["message"] == "com.example.tools/echo@9.9.9 is not installed on this node"


def test_a_tool_missing_from_the_cache_is_tool_failed_unpack(runner: Runner, cache: InstallCache) -> None:
    tool = install_tree(cache, ECHO, ECHO_TOOL, version="1.0.1")
    shutil.rmtree(tool)
    result = runner.call(echo_call("noop", {}).model_copy(update={"version": "1.0.1"}))
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_failed", "unpack")
    assert err["message"] == "the tool's unpacked files are missing from the node's install cache"


def test_input_files_past_the_vms_in_size_are_tool_unavailable_copy(runner: Runner) -> None:
    big = {"$bytes": base64.b64encode(b"z" * (3 << 20)).decode(), "name": "big.bin"}
    result = runner.call(echo_call("echo", {"text": "x", "file": big}))
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "copy")
    assert err["message"] == "the input files could not be put in the VM's /in: No space left on device"


def test_a_command_that_is_not_in_the_tool_is_tool_unavailable_exec(runner: Runner) -> None:
    call = echo_call("noop", {}).model_copy(update={"cmd": ["/tool/bin/no-such-tool"]})
    result = runner.call(call)
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "exec")
    assert err["message"] == "cmd[0] /tool/bin/no-such-tool is not a file of the tool"


def test_a_call_whose_time_runs_out_waiting_for_a_vm_is_no_slot(
    driver: BwrapDriver, cache: InstallCache
) -> None:
    one_slot, busy = _one_slot_held(driver, cache, seconds=1)
    result = one_slot.call(echo_call("noop", {}, timeout_ms=300))
    busy.join()
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "no_slot")
    assert result.usage == {"vcpu_ms": 0, "gib_ms": 0}


def test_a_call_that_waited_for_a_slot_and_then_timed_out_says_how_long_its_command_had(
    driver: BwrapDriver, cache: InstallCache
) -> None:
    one_slot, busy = _one_slot_held(driver, cache, seconds=2)
    result = one_slot.call(echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=3000))
    busy.join()
    err = _err(result)
    assert (result.ran, err["code"]) == (True, "tool_timed_out")
    said = re.fullmatch(
        r"the tool's command did not finish in the (\d+) ms left of the call's 3000 ms: "
        r"the node took (\d+) ms to start it \(a free slot, its VM\)",
        err["message"],
    )
    assert said, err["message"]
    left, took = said.groups()
    assert int(left) + int(took) == 3000 and int(took) > 1000, err["message"]  # it waited for the 2 s call
    assert int(left) - 100 <= result.timings["run"] < int(left) + 1000


def _one_slot_held(
    driver: BwrapDriver, cache: InstallCache, *, seconds: int
) -> tuple[Runner, threading.Thread]:
    """A one-slot runner whose slot a call sleeping `seconds` holds (its thread, to join)."""
    one_slot = Runner(driver, cache, slots=1)
    holder = echo_call("fail", {"mode": "sleep", "seconds": seconds}, timeout_ms=5000)
    busy = threading.Thread(target=one_slot.call, args=(holder,))
    busy.start()
    _wait_until_a_call_holds_a_slot(one_slot)
    return one_slot, busy


def _wait_until_a_call_holds_a_slot(runner: Runner) -> int:
    """Wait until a call started in another thread holds a slot (with over 1 s left); its Retry-After."""
    deadline = time.monotonic() + PATIENCE_S
    while (retry_after := runner.retry_after_s()) == 1:
        assert time.monotonic() < deadline, "the call did not take a slot"
        time.sleep(0.01)
    return retry_after


@pytest.mark.parametrize("timeout_ms", [1, 2, 3, 4])
def test_a_call_with_too_little_time_to_start_is_always_no_slot(runner: Runner, timeout_ms: int) -> None:
    for _ in range(5):
        result = runner.call(echo_call("noop", {}, timeout_ms=timeout_ms))
        err = _err(result)
        assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "no_slot")
        assert err["message"] in (
            "the call's time ran out before its command could start",
            "the call's time ran out before a VM was free",
        )
        assert result.usage == {"vcpu_ms": 0, "gib_ms": 0}


def test_retry_after_is_the_soonest_deadline_of_the_running_calls(runner: Runner) -> None:
    assert runner.retry_after_s() == 1
    slow = threading.Thread(
        target=runner.call, args=(echo_call("fail", {"mode": "sleep", "seconds": 1}, timeout_ms=4000),)
    )
    slow.start()
    soonest = _wait_until_a_call_holds_a_slot(runner)
    slow.join()
    assert soonest == 4  # 4 s of time, a moment of it gone: rounded up
    assert runner.retry_after_s() == 1


def test_two_hundred_calls_leave_nothing_behind(runner: Runner) -> None:
    failures: list[str] = []

    def worker() -> None:
        for _ in range(50):
            r = runner.call(echo_call("noop", {}))
            if not r.ok:
                failures.append(str(r.error))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert VERSION == "1.0.0"


def test_a_command_the_vm_cannot_execute_is_tool_unavailable_exec(runner: Runner) -> None:
    result = runner.call(hostile_call("badinterp"))  # its #! names an interpreter the base does not have
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "exec")
    assert err["message"] == "the command could not be executed in the VM: No such file or directory"
    assert result.usage == {"vcpu_ms": 0, "gib_ms": 0}


def test_a_pooled_vm_is_up_before_its_call_and_an_unused_one_leaves_nothing(driver: BwrapDriver) -> None:
    driver.settle()
    vm = driver.claim(time.monotonic() + 5)
    assert isinstance(vm, BwrapVm)
    try:
        # bwrap (which joined the group before it made the sandbox), its sandbox's init and the launcher
        # already run in the VM's cgroup, as the VM's host uid
        assert vm.proc is not None and len(vm.cgroup.pids()) == 3 and vm.proc.pid in vm.cgroup.pids()
        assert set(vm.cgroup.pids()) <= set(vm_processes())
    finally:
        vm.delete()


def test_a_claimed_vm_keeps_its_place_in_the_pool_until_its_tool_is_mounted_or_it_is_deleted(
    driver: BwrapDriver, cache: InstallCache
) -> None:
    # the kernel makes mounts one at a time: the pool's next VM is prepared after the claimed one's tool
    # mount, which would otherwise wait for its mounts
    driver.settle()
    tool_dir = cache.tool_dir(echo_call("noop", {}).pack, VERSION)
    assert tool_dir is not None
    for hand_over in ("unpack", "delete"):
        vm = driver.claim(time.monotonic() + 5)
        try:
            assert len(driver.settle(timeout_s=0.3)) == driver.pool_target() - 1
            if hand_over == "unpack":
                vm.copy(tool_dir, [])
                vm.unpack()
            else:
                vm.delete()
            assert len(driver.settle(timeout_s=30)) == driver.pool_target()
        finally:
            vm.delete()


def test_pooled_vms_killed_while_they_wait_are_skipped(runner: Runner, driver: BwrapDriver) -> None:
    driver.settle()
    pidfds: list[int] = []
    for pid in driver.pool_pids():  # what the OOM killer or an operator could do to a waiting VM
        with contextlib.suppress(ProcessLookupError):
            fd = os.pidfd_open(pid)
            pidfds.append(fd)
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    # SIGKILL takes effect asynchronously: the VMs are dead (their processes have exited) before the call, as
    # VMs killed while they wait are. A call that claims a VM still dying races with its death instead.
    try:
        for fd in pidfds:
            assert select.select([fd], [], [], 10)[0], "a killed VM process did not exit"
    finally:
        for fd in pidfds:
            os.close(fd)
    result = runner.call(echo_call("noop", {}))
    assert result.ok and result.output == {}, result.error
