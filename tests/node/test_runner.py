"""The json-stdio runner with the echo tool in real bubblewrap VMs."""

from __future__ import annotations

import base64
from pathlib import Path

from nodetest import echo_call

from node.runner import Runner
from node.vm.bwrap import BwrapDriver


def test_noop_answers_an_empty_object_with_timings_and_usage(runner: Runner) -> None:
    result = runner.call(echo_call("noop", {}))
    assert result.ok and result.ran, result.error
    assert result.output == {}
    assert list(result.timings) == ["start", "copy", "unpack", "run", "collect", "delete"]
    assert result.usage["vcpu_ms"] >= 1 and result.usage["gib_ms"] >= 1


def test_echo_returns_its_text_and_its_file(runner: Runner) -> None:
    file = {"$bytes": base64.b64encode(b"hello\n").decode(), "name": "hello.txt", "contentType": "text/plain"}
    result = runner.call(echo_call("echo", {"text": "hi", "file": file}))
    assert result.ok, result.error
    assert result.output == {
        "text": "hi",
        "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"},
    }


def test_fail_with_a_tool_error_reports_the_tools_code_and_message(runner: Runner) -> None:
    result = runner.call(
        echo_call("fail", {"mode": "tool_error", "code": "bad_thing", "message": "it broke"})
    )
    assert not result.ok and result.ran and result.error is not None
    err = result.error.model_dump()
    assert err["code"] == "tool_failed" and err["reason"] == "tool_error"
    assert (err["tool_code"], err["tool_message"], err["retryable"]) == ("bad_thing", "it broke", False)


def test_the_vm_pools_threads_carry_their_names_for_the_operating_system(runner: Runner) -> None:
    # `top -H`, `ps -L` and perf tell the VMs' preparing and removing apart from the calls
    assert runner.call(echo_call("noop", {})).ok
    names = {p.read_text().strip() for p in Path("/proc/self/task").glob("*/comm")}
    assert {"b3os-vm-pool-0", "b3os-vm-pool-1", "b3os-vm-remover"} <= names


def _mount_of(point: Path) -> tuple[str, str]:
    """The filesystem type and the propagation fields of the mount at `point` (this process's view)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(point):
            dash = fields.index("-")
            return fields[dash + 1], " ".join(fields[6:dash])
    raise AssertionError(f"nothing is mounted at {point}")


def test_the_vms_directories_are_made_in_memory_whatever_the_run_dirs_filesystem(
    runner: Runner, driver: BwrapDriver, run_dir: Path
) -> None:
    # the node's directory is a tmpfs of its own (on an ext4 run dir, making and removing each VM's
    # directories took ~0.4 ms of the node's CPU), shared so that a VM's mounts reach the sandboxes
    assert runner.call(echo_call("noop", {})).ok
    fstype, propagation = _mount_of(driver.node_dir)
    assert fstype == "tmpfs" and propagation.startswith("shared:"), (fstype, propagation)
    assert (driver.node_dir.stat().st_mode & 0o777) == 0o711
    assert run_dir.stat().st_dev != driver.node_dir.stat().st_dev
