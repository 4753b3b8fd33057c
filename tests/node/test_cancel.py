"""Cancelling a call on the node: its VM is killed at once and the call answers how its command ended."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from nodetest import echo_call, leftovers, wait_running

from node.models import NodeCallResult
from node.runner import Runner
from node.vm.bwrap import BwrapDriver
from node.vm.cgroups import CallCgroup


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _in_background(runner: Runner, call: object) -> tuple[threading.Thread, list[NodeCallResult]]:
    results: list[NodeCallResult] = []
    thread = threading.Thread(target=lambda: results.append(runner.call(call)))  # type: ignore[arg-type]
    thread.start()
    return thread, results


def test_a_cancelled_call_is_killed_at_once_and_answers_sigkill(runner: Runner) -> None:
    call = echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=20_000)
    thread, results = _in_background(runner, call)
    assert wait_running("sleep 30 "), "the command did not start in its VM"
    assert runner.cancel(call.call_id) == "killed"
    thread.join(timeout=15)  # the call's own end would be its 20 s timeout (tool_timed_out), not SIGKILL
    (result,) = results
    assert (result.ok, result.ran, result.cancelled) == (False, True, True)
    assert result.error is not None
    assert (result.error.code, result.error.reason, result.error.model_dump()["signal"]) == (
        "tool_failed",
        "signal",
        9,
    )
    assert result.error.message == "the tool was killed by signal 9 (SIGKILL) (the call was cancelled)"
    assert result.usage["vcpu_ms"] >= 1 and result.usage["gib_ms"] >= 1  # it ran: compute is charged
    assert runner.cancel(call.call_id) == "unknown"  # it has ended


def test_a_killed_vm_dies_as_one_even_when_its_group_is_signalled_children_first(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On cgroup v1 a group is killed one process after another in pid order, and after the pids wrap a child
    can come before its parent: the echo tool's shell must not print its success line once its `sleep` is
    killed. The group's kill here signals the newest process first and pauses, as a busy machine would."""
    group_kill = CallCgroup.kill

    def children_first(group: CallCgroup, timeout_s: float = 2.0) -> bool:
        for pid in sorted(group.pids(), reverse=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        return group_kill(group, timeout_s)

    monkeypatch.setattr(CallCgroup, "kill", children_first)
    call = echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=20_000)
    thread, results = _in_background(runner, call)
    assert wait_running("sleep 30 "), "the command did not start in its VM"
    assert runner.cancel(call.call_id) == "killed"
    thread.join(timeout=15)
    (result,) = results
    assert (result.ok, result.cancelled) == (False, True), result
    assert result.error is not None and result.error.model_dump()["signal"] == 9, result.error


def test_a_cancel_that_comes_before_its_call_answers_the_call_at_once(runner: Runner) -> None:
    call = echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=20_000)
    assert runner.cancel(call.call_id) == "unknown"
    result = runner.call(call)
    assert (result.ok, result.ran, result.cancelled) == (False, False, True)  # no VM ran it
    assert result.error is not None
    assert (result.error.code, result.error.reason, result.error.message) == (
        "tool_unavailable",
        "exec",
        "the call was cancelled before it reached this node",
    )
    again = runner.call(call.model_copy(update={"input": {"mode": "sleep", "seconds": 0}}))
    assert (again.ok, again.cancelled) == (True, False)  # a cancel is kept for one call only
