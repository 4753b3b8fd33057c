"""The microvm driver (QEMU `microvm`, its own kernel per call): the echo tool, the error reasons and a few
hostile tools, in real guests. The rest of the hosted-tool tests against it are `test_microvm_full.py`
(marker `microvm_full`, run by .ci/run): a TCG boot takes a core for seconds."""

from __future__ import annotations

import base64
import socket

import pytest
from nodetest import echo_call, hostile_call

from node.models import NodeCallResult
from node.runner import Runner
from node.vm.microvm import MicroVmDriver


def _err(result: NodeCallResult) -> dict:
    assert result.error is not None, result.output
    return result.error.model_dump()


def _only_pooled_vms_left(driver: MicroVmDriver) -> bool:
    driver.settle()
    pooled = {vm.id for vm in list(driver._pool)}
    return {p.name for p in driver.node_dir.iterdir()} <= {"launcher", *pooled}


def test_echo_returns_its_text_and_file_from_a_pooled_vm_with_phases_and_usage(
    microvm_runner: Runner, microvm: MicroVmDriver
) -> None:
    microvm.settle()
    assert microvm.pool_ready() == 2 and microvm.accel in ("kvm", "tcg") and microvm.accel_reason
    file = {"$bytes": base64.b64encode(b"hello\n").decode(), "name": "hello.txt", "contentType": "text/plain"}
    result = microvm_runner.call(echo_call("echo", {"text": "hi", "file": file}, timeout_ms=30_000))
    assert result.ok, result.error
    assert result.output == {
        "text": "hi",
        "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"},
    }
    assert list(result.timings) == ["start", "copy", "unpack", "run", "collect", "delete"]
    assert result.timings["start"] < 1000, "a pooled VM is handed over, not booted in the call"
    assert result.usage["vcpu_ms"] >= 1 and result.usage["gib_ms"] >= 1
    assert _only_pooled_vms_left(microvm), "the used VM's QEMU, cgroup and directory are gone"


def test_a_tool_error_and_an_exit_status_are_tool_failed_with_their_reason(microvm_runner: Runner) -> None:
    err = _err(
        microvm_runner.call(echo_call("fail", {"mode": "tool_error", "code": "bad_thing"}, timeout_ms=30_000))
    )
    assert (err["code"], err["reason"], err["tool_code"]) == ("tool_failed", "tool_error", "bad_thing")
    result = microvm_runner.call(echo_call("fail", {"mode": "exit", "exitCode": 3}, timeout_ms=30_000))
    err = _err(result)
    assert (err["code"], err["reason"], err["exit_code"]) == ("tool_failed", "exit", 3)
    assert result.ran and result.usage["vcpu_ms"] >= 1, "a failed call whose command ran is metered"


def test_a_tool_has_no_network_and_past_its_time_is_tool_timed_out(microvm_runner: Runner) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        result = microvm_runner.call(
            hostile_call("network", {"port": listener.getsockname()[1]}, timeout_ms=30_000)
        )
        assert result.ok, result.error
        assert result.output == {"reached": "ConnectionRefusedError"}  # its own loopback, nothing behind it
        with pytest.raises(TimeoutError):
            listener.accept()
    result = microvm_runner.call(echo_call("fail", {"mode": "sleep", "seconds": 30}, timeout_ms=3000))
    assert _err(result)["code"] == "tool_timed_out" and result.ran


def test_a_version_that_is_not_installed_is_pack_unavailable_and_charged_nothing(
    microvm_runner: Runner,
) -> None:
    call = echo_call("noop", {})
    call.version = "9.9.9"
    result = microvm_runner.call(call)
    assert (_err(result)["code"], result.ran) == ("pack_unavailable", False)
    assert not any(result.usage.values())
