"""The microvm driver (QEMU `microvm`, its own kernel per call): the echo tool, the error reasons and a few
hostile tools, in real guests. The rest of the hosted-tool tests against it are `test_microvm_full.py`
(marker `microvm_full`, run by .ci/run): a TCG boot takes a core for seconds."""

from __future__ import annotations

import base64
import os
import re
import socket
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from jstest import install_js, js_call
from nodetest import VM_UID_BASE, echo_call, hostile_call
from prometheus_client import generate_latest

from node.cache import InstallCache
from node.js.runtime import prepare_runtime
from node.metrics import NodeMetrics
from node.models import NodeCallResult
from node.runner import Runner
from node.vm.base import VmError
from node.vm.bwrap import BwrapDriver
from node.vm.guest import Guest
from node.vm.microvm import MicroVmDriver
from node.vm.qemu import kvm_group, qemu_argv
from node.vm.sandbox import VmLimits
from node.vm.stale import cleanup_stale


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
    assert result.usage["vcpu_ms"] >= 1 and result.usage["gib_ms"] >= 1, "a command that ran is metered"


def test_a_version_that_is_not_installed_is_pack_unavailable_and_charged_nothing(
    microvm_runner: Runner,
) -> None:
    call = echo_call("noop", {})
    call.version = "9.9.9"
    result = microvm_runner.call(call)
    assert (_err(result)["code"], result.ran) == ("pack_unavailable", False)
    assert not any(result.usage.values())


def test_kvm_is_used_only_through_a_device_open_to_a_group(tmp_path: Path) -> None:
    device = tmp_path / "kvm"
    device.touch()
    os.chmod(device, 0o600)
    assert kvm_group(device)[0] is None and "mode 0600" in kvm_group(device)[1]
    os.chown(device, 0, 4242)
    os.chmod(device, 0o660)
    assert kvm_group(device) == (4242, "")
    assert kvm_group(tmp_path / "none") == (None, f"{tmp_path / 'none'} does not exist (no KVM on this host)")


def test_qemu_gets_no_network_device_no_disk_and_its_own_seccomp_filter(tmp_path: Path) -> None:
    argv = qemu_argv("qemu-system-x86_64", "tcg", VmLimits(), tmp_path, 7, 8)
    assert argv[argv.index("-M") + 1] == "microvm"
    assert {"-nodefaults", "-no-user-config", "-no-reboot"} <= set(argv)
    assert (argv[argv.index("-smp") + 1], argv[argv.index("-m") + 1]) == ("1", "512M")
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    kinds = [d.split(",")[0] for d in devices]
    assert kinds == ["virtio-serial-device", "virtserialport", "virtio-rng-device"]
    assert not {"-netdev", "-nic", "-net", "-drive", "-hda"} & set(argv)
    assert argv[argv.index("-sandbox") + 1].startswith("on,")
    assert argv[argv.index("-kernel") + 1] == "/proc/self/fd/7"


def test_a_pooled_vms_qemu_runs_as_its_own_uid_in_its_cgroup_under_seccomp(microvm: MicroVmDriver) -> None:
    microvm.settle()
    vms = list(microvm._pool)
    assert len({vm.uid for vm in vms}) == len(vms) == 2
    for vm in vms:
        assert vm.proc is not None
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{vm.proc.pid}/status").read_text().splitlines()
        )
        assert status["Uid"].split() == [str(vm.uid)] * 4 and status["Gid"].split() == [str(vm.uid)] * 4
        assert status["Groups"].strip() == ""
        assert status["Seccomp"].strip() == "2", "QEMU's -sandbox filter is on"
        assert vm.cgroup.pids() == [vm.proc.pid], "QEMU is alone in the VM's cgroup from its start"
        assert "-netdev" not in Path(f"/proc/{vm.proc.pid}/cmdline").read_bytes().split(b"\0")


def test_a_driver_that_cannot_have_what_it_is_told_refuses_to_start_and_leaves_nothing(
    guest: Guest, run_dir: Path
) -> None:
    long_dir = run_dir / ("d" * 80)
    with pytest.raises(VmError, match="is too long for the VMs' sockets"):
        MicroVmDriver(guest=guest, run_dir=long_dir, pool_size=0, uid_base=VM_UID_BASE + 40)
    gid, why = kvm_group()
    if gid is None:  # this host: B3OS_MICROVM_ACCEL=kvm is refused, naming why
        before = set(run_dir.iterdir())
        with pytest.raises(VmError, match=re.escape(f"B3OS_MICROVM_ACCEL=kvm, but {why}")):
            MicroVmDriver(guest=guest, run_dir=run_dir, pool_size=0, uid_base=VM_UID_BASE + 40, accel="kvm")
        assert set(run_dir.iterdir()) == before
    else:  # a host whose KVM the VMs' uids can use: a guest boots on it
        drv = MicroVmDriver(guest=guest, run_dir=run_dir, pool_size=0, uid_base=VM_UID_BASE + 40, accel="kvm")
        assert drv.accel == "kvm"
        drv.close()


def test_the_nodes_metrics_give_the_microvms_median_boot(
    microvm: MicroVmDriver, microvm_runner: Runner
) -> None:
    microvm.settle()
    state = SimpleNamespace(runner=microvm_runner, settings=SimpleNamespace(slots=4), in_flight=0)
    text = generate_latest(NodeMetrics(lambda: state).registry).decode()
    boot = next(line for line in text.splitlines() if line.startswith("b3os_node_vm_boot_seconds "))
    assert float(boot.split()[1]) == statistics.median(microvm.boot_ms) / 1000 > 0
    assert "b3os_node_pool_size 2.0" in text


def test_on_a_microvm_node_js_actions_run_in_the_sandbox_driver(
    microvm: MicroVmDriver, driver: BwrapDriver, cache: InstallCache
) -> None:
    install_js(cache)
    runner = Runner(microvm, cache, slots=2, js_runtime=prepare_runtime(cache.root), js_driver=driver)
    microvm.settle()
    pooled = {vm.id for vm in list(microvm._pool)}
    result = runner.call(js_call("echo", {"a": 1}))
    assert result.ok, result.error
    assert result.output is not None and result.output["input"] == {"a": 1}
    assert {vm.id for vm in list(microvm._pool)} == pooled, "no microVM was taken for the js call"


def test_a_dead_microvm_nodes_directory_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead, live = tmp_path / "microvm-999999999-0a1b2c", tmp_path / f"microvm-{os.getpid()}-0a1b2c"
    for path in (dead, live):
        (path / "mvm-0123456789ab").mkdir(parents=True)
    assert cleanup_stale(tmp_path) == [f"{dead} (0 mounts)"]
    assert not dead.exists() and live.exists()
