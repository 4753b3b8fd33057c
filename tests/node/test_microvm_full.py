"""The rest of the hosted-tool tests against the microvm driver (marker `microvm_full`: not in the default
run, .ci/run runs them with `-m microvm_full`): every error reason, the hostile tools, cancel, a cold boot.
Each call boots a guest (under TCG a few seconds of a core), so these take minutes."""

from __future__ import annotations

import base64
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodetest import ECHO, ECHO_TOOL, VM_UID_BASE, echo_call, hostile_call, install_tree

from node.cache import InstallCache
from node.models import NodeCallResult
from node.runner import Runner
from node.vm.guest import Guest
from node.vm.microvm import MicroVmDriver

pytestmark = pytest.mark.microvm_full


def _err(result: NodeCallResult) -> dict:
    assert result.error is not None, result.output
    return result.error.model_dump()


def _qemu_pids(driver: MicroVmDriver) -> set[int]:
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                uid = proc.stat().st_uid
                comm = (proc / "comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("qemu") and driver.uids.base <= uid < driver.uids.base + driver.uids.count:
                found.add(int(proc.name))
    return found


@pytest.fixture(autouse=True)
def only_the_pool_is_left(microvm: MicroVmDriver) -> Iterator[None]:
    yield
    microvm.settle()
    pooled = list(microvm._pool)
    assert {p.name for p in microvm.node_dir.iterdir()} <= {"launcher", *(vm.id for vm in pooled)}
    assert _qemu_pids(microvm) <= {vm.proc.pid for vm in pooled if vm.proc is not None}


@pytest.mark.parametrize(
    ("ask", "reason", "detail", "message"),
    [
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
    microvm_runner: Runner, ask: dict, reason: str, detail: dict, message: str
) -> None:
    result = microvm_runner.call(echo_call("fail", ask, timeout_ms=30_000))
    err = _err(result)
    assert (err["code"], err["reason"], err["message"]) == ("tool_failed", reason, message)
    assert {k: err[k] for k in detail} == detail
    assert result.ran and result.usage["vcpu_ms"] >= 1


def test_a_tool_missing_from_the_cache_is_tool_failed_unpack(
    microvm_runner: Runner, cache: InstallCache
) -> None:
    tool = install_tree(cache, ECHO, ECHO_TOOL, version="1.0.2")
    shutil.rmtree(tool)
    result = microvm_runner.call(
        echo_call("noop", {}, timeout_ms=30_000).model_copy(update={"version": "1.0.2"})
    )
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_failed", "unpack")
    assert err["message"] == "the tool's unpacked files are missing from the node's install cache"


def test_input_files_past_the_vms_in_size_are_tool_unavailable_copy(microvm_runner: Runner) -> None:
    big = {"$bytes": base64.b64encode(b"z" * (3 << 20)).decode(), "name": "big.bin"}
    result = microvm_runner.call(echo_call("echo", {"text": "x", "file": big}, timeout_ms=30_000))
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "copy")
    assert err["message"] == "the input files could not be put in the VM's /in: No space left on device"


def test_a_command_the_vm_cannot_execute_is_tool_unavailable_exec(microvm_runner: Runner) -> None:
    result = microvm_runner.call(hostile_call("badinterp", timeout_ms=30_000))
    err = _err(result)
    assert (result.ran, err["code"], err["reason"]) == (False, "tool_unavailable", "exec")
    assert err["message"] == "the command could not be executed in the VM: No such file or directory"
    assert result.usage == {"vcpu_ms": 0, "gib_ms": 0}


def test_a_call_with_too_little_time_to_start_is_no_slot(microvm_runner: Runner) -> None:
    result = microvm_runner.call(echo_call("noop", {}, timeout_ms=3))
    assert (result.ran, _err(result)["code"], _err(result)["reason"]) == (
        False,
        "tool_unavailable",
        "no_slot",
    )


def test_allocating_1_gib_is_killed_inside_the_vms_512_mib(microvm_runner: Runner) -> None:
    result = microvm_runner.call(hostile_call("alloc", timeout_ms=30_000))
    err = _err(result)
    assert (err["code"], err["reason"], err["signal"]) == ("tool_failed", "signal", 9)
    assert "all of the VM's 512 MiB of memory" in err["message"]
    assert result.ran and result.usage["gib_ms"] >= 1


def test_a_fork_bomb_stops_at_the_pids_limit(microvm_runner: Runner) -> None:
    err = _err(microvm_runner.call(hostile_call("forkbomb", timeout_ms=30_000)))
    assert (err["code"], err["reason"], err["tool_code"]) == ("tool_failed", "tool_error", "fork_failed")
    made = int(err["tool_message"].split("after ")[1].split(" ")[0])
    assert 10 < made < 64


def test_filling_the_disk_stops_at_work_and_out_sizes(microvm_runner: Runner) -> None:
    result = microvm_runner.call(hostile_call("diskfill", timeout_ms=30_000))
    assert result.ok, result.error
    assert result.output is not None
    assert 32 << 20 <= result.output["work"] <= 64 << 20
    assert result.output["out"] <= 1 << 20


def test_a_daemon_does_not_outlive_the_call(microvm_runner: Runner) -> None:
    result = microvm_runner.call(hostile_call("daemon", timeout_ms=30_000))
    assert result.ok and result.output == {"left": "a daemon"}


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("symlink", "output file /out/file is not a regular file (a symlink?)"),
        ("dir", "output file /out/file is a directory"),
        ("traversal", "output file /out/../etc/hostname is not a file name directly under /out"),
        ("too_big", "output files pass 262144 bytes in all (at /out/part2)"),
    ],
)
def test_an_output_file_that_is_not_a_regular_file_under_out_is_refused(
    microvm_runner: Runner, kind: str, says: str
) -> None:
    err = _err(microvm_runner.call(hostile_call("badfile", {"kind": kind}, timeout_ms=30_000)))
    assert (err["code"], err["reason"], err["message"]) == ("tool_failed", "output_file", says)


def test_a_cancelled_call_is_killed_at_once_and_answers_sigkill(microvm_runner: Runner) -> None:
    call = echo_call("fail", {"mode": "sleep", "seconds": 60}, timeout_ms=60_000)
    results: list[NodeCallResult] = []
    worker = threading.Thread(target=lambda: results.append(microvm_runner.call(call)))
    worker.start()
    end = time.monotonic() + 60
    while time.monotonic() < end and getattr(microvm_runner._held.get(call.call_id), "vm", None) is None:
        time.sleep(0.05)  # until the call has its VM
    time.sleep(1.0)  # and its command runs (the hand-over takes tens of ms)
    assert microvm_runner.cancel(call.call_id) == "killed"
    worker.join(timeout=60)
    err = _err(results[0])
    assert results[0].cancelled and results[0].ran
    assert (err["code"], err["reason"], err["signal"]) == ("tool_failed", "signal", 9)
    assert err["message"] == "the tool was killed by signal 9 (SIGKILL) (the call was cancelled)"


def test_with_no_vm_booted_ahead_a_call_boots_its_own(
    guest: Guest, run_dir: Path, cache: InstallCache
) -> None:
    cold = MicroVmDriver(guest=guest, run_dir=run_dir, pool_size=0, uid_base=VM_UID_BASE + 40, accel="tcg")
    try:
        result = Runner(cold, cache, slots=1).call(echo_call("noop", {}, timeout_ms=60_000))
        assert result.ok, result.error
        assert result.timings["start"] >= cold.boot_ms[-1] > 0, "the call's start phase is the boot"
    finally:
        cold.close()
    assert not cold.node_dir.exists()


def test_a_tool_sees_no_host_file_no_node_secret_and_no_other_process(
    microvm_runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("B3OS_NODE_CREDENTIAL", "node-secret-value")
    paths = ["/etc/hostname", "/root/.b3os/base/rootfs/.b3os-base.json", __file__, "/proc/cmdline",
             "/etc/resolv.conf", "/proc/1/mem"]  # fmt: skip
    result = microvm_runner.call(hostile_call("readhost", {"paths": paths}, timeout_ms=30_000))
    assert result.ok and result.output is not None, result.error
    out = result.output
    assert set(out["env"]) <= {"PATH", "HOME", "LANG", "PWD"}
    assert (out["env"]["HOME"], out["env"]["LANG"], out["cwd"]) == ("/work", "C.UTF-8", "/work")
    assert (out["uid"], out["gid"], out["hostname"]) == (1000, 1000, "vm")
    assert "node-secret-value" not in str(out) and "B3OS" not in str(out)
    assert out["files"][__file__] == "error: FileNotFoundError"
    assert out["files"]["/root/.b3os/base/rootfs/.b3os-base.json"].startswith("error: ")
    assert out["pids"] == sorted(out["pids"]) and len(out["pids"]) <= 2  # itself: no init, no kernel thread
    assert out["tool"] == ["run"]
    assert out["writes"]["/tool/new-file"] == "EROFS" and out["writes"]["/in/new-file"] == "EROFS"
    assert out["files"]["/proc/1/mem"] == "error: FileNotFoundError"
    assert out["files"]["/proc/cmdline"] == ""
    assert out["files"]["/etc/resolv.conf"] == "# a VM has no network, so no resolver\n"
    assert out["fds"] == [0, 1, 2, 3]


def test_a_cpu_spin_times_out_and_gets_one_vcpu_only(microvm_runner: Runner) -> None:
    result = microvm_runner.call(hostile_call("spin", timeout_ms=3000))
    assert _err(result)["code"] == "tool_timed_out"
    # QEMU's cgroup holds the VM to one vCPU (its quota): two spinning processes get one CPU's time
    assert 100 <= result.usage["vcpu_ms"] <= 3600
