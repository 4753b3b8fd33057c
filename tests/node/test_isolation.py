"""VMs apart from each other and from the host's users: per-VM host uids, the seccomp filter, private VM
directories, a read-only /dev, no host path inside, and an outcome no tool can hold back (real VMs)."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodetest import VM_UIDS, _status, cmdline, hostile_call, leftovers, vm_processes, wait_running

from node.cache import InstallCache
from node.models import NodeCallResult
from node.runner import Runner
from node.vm import exits, uids
from node.vm.base import VmError
from node.vm.bwrap import BwrapDriver

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
needs_pidfd_exit = pytest.mark.skipif(
    not exits.supported(), reason="the kernel gives no exit status through pidfds (Linux before 6.15)"
)


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _vm_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next((n for line in lines if (n := line.rsplit("/", 1)[-1]).startswith("vm-")), "")


def _running_tool(driver: BwrapDriver) -> tuple[int, str]:
    """The pid and the VM id of the one tool running now (`/tool/run`)."""
    assert wait_running("/tool/run"), "the tool did not start"
    pid = next(p for p in vm_processes(driver) if "/tool/run" in cmdline(p))
    return pid, _vm_of(pid)


def _in_background(runner: Runner, call: object) -> tuple[threading.Thread, dict[str, NodeCallResult]]:
    result: dict[str, NodeCallResult] = {}
    thread = threading.Thread(target=lambda: result.update(r=runner.call(call)))  # type: ignore[arg-type]
    thread.start()
    return thread, result


def test_a_tool_exhausting_its_quotas_leaves_another_calls_intact(
    runner: Runner, driver: BwrapDriver
) -> None:
    hog_thread, hog = _in_background(runner, hostile_call("quota", {"mode": "hog", "hold_s": 6}))
    _running_tool(driver)
    time.sleep(0.3)  # the hog takes its inotify instances in a few ms, then holds them (6 s: a loaded
    # machine may take seconds to start the probe's VM and call)
    probe = runner.call(hostile_call("quota", {"mode": "probe"}))
    # a pool VM may end between the listing and the read: it is then left out
    uids = {int(status["Uid"].split()[0]) for p in vm_processes(driver) if (status := _status(str(p)))}
    assert hog_thread.is_alive(), "the hog ended before the other call ran"
    hog_thread.join()
    assert probe.ok and hog["r"].ok, (probe.error, hog["r"].error)
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    assert hog["r"].output == {"keys": ["EPERM"], "inotify": limit, "stopped": "EMFILE"}
    # the other call gets its own inotify instances and sees nothing of the hog's keys
    assert probe.output == {"inotify": 8, "stopped": "", "key_users": ""}
    assert len(uids) >= 3 and uids <= set(VM_UIDS)  # the hog, the pool's VMs: a host uid each, none root


def test_a_local_user_cannot_read_a_running_calls_input_or_list_its_directory(
    runner: Runner, driver: BwrapDriver, run_dir: Path, cache: InstallCache
) -> None:
    secret = b"the caller's private bytes"
    value = {"$bytes": base64.b64encode(secret).decode(), "name": "secret.txt"}
    call = hostile_call("sleepy", {"sleep_s": 1.5, "file": value})
    call = call.model_copy(update={"file_fields": ["file"]})
    thread, result = _in_background(runner, call)
    _pid, vm_id = _running_tool(driver)
    vm_dir = driver.node_dir / vm_id
    in_file = vm_dir / "in" / "file" / "secret.txt"
    assert in_file.read_bytes() == secret and (in_file.stat().st_mode & 0o777) == 0o640
    assert (vm_dir.stat().st_mode & 0o777) == 0o700 and vm_dir.stat().st_uid in VM_UIDS
    for argv in (["cat", str(in_file)], ["ls", str(vm_dir)], ["ls", str(driver.node_dir)]):
        denied = subprocess.run([*NOBODY, *argv], capture_output=True, text=True, check=False)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, (argv, denied)
    # what any user sees in ps: no VM directory, VM id or call id
    for pid in vm_processes(driver):
        shown = cmdline(pid)
        assert vm_id not in shown and str(run_dir) not in shown and call.call_id not in shown, shown
    thread.join()
    assert result["r"].ok and result["r"].output == {"slept": 1.5, "size": len(secret)}, result["r"].error


def test_the_seccomp_filter_denies_kernel_attack_surface_and_other_socket_families(runner: Runner) -> None:
    result = runner.call(hostile_call("syscalls"))
    assert result.ok, result.error
    assert result.output == {
        "io_uring_setup": "ENOSYS",
        "userfaultfd": "EPERM",
        "ptrace_attach_init": "EPERM",
        "keyctl": "EPERM",
        "perf_event_open": "EPERM",
        "bpf": "EPERM",
        "process_vm_readv": "EPERM",
        "vsock": "EAFNOSUPPORT",
        "netlink": "EAFNOSUPPORT",
        "unix": "ok",
        "inet": "ok",
        "inet6": "ok",
        "stop_init": "ok",  # accepted and ignored: the VM's init takes no signal from inside
    }


def test_dev_is_read_only_and_dev_shm_fills_at_16_mib(runner: Runner) -> None:
    result = runner.call(hostile_call("devfill"))
    assert result.ok, result.error
    assert result.output == {"new_file": "EROFS", "null": "written", "shm": 16 << 20, "shm_stop": "ENOSPC"}


def test_a_tool_sees_no_host_path_in_its_inits_command_line_or_its_mount_table(
    runner: Runner, driver: BwrapDriver, run_dir: Path, cache: InstallCache, base_rootfs: Path
) -> None:
    result = runner.call(hostile_call("whereami"))
    assert result.ok and result.output is not None, result.error
    assert result.output["init_cmdline"] == ["error: FileNotFoundError"]  # its init is hidden
    lines = result.output["mountinfo"]
    host = (str(run_dir), str(cache.root), str(base_rootfs), str(driver.node_dir), "/root")
    assert [line for line in lines if any(path in line for path in host)] == []
    devices = {"/null", "/zero", "/full", "/random", "/urandom", "/tty"}
    # every mount's root: no host directory (/cmdline: the empty file the VM reads as the kernel's)
    assert {line.split()[3] for line in lines} <= {"/", "/cmdline"} | devices


@needs_pidfd_exit
def test_a_call_answers_when_its_sandboxs_init_is_stopped(runner: Runner, driver: BwrapDriver) -> None:
    thread, result = _in_background(runner, hostile_call("sleepy", {"sleep_s": 1.0}, timeout_ms=6000))
    tool, vm_id = _running_tool(driver)
    init = int(_status(str(tool))["PPid"])
    monitor = int(_status(str(init))["PPid"])  # bwrap outside the VM, which reports init's exit
    assert _vm_of(init) == vm_id and cmdline(init).startswith("bwrap --args")
    for pid in (init, monitor):  # what a ptrace-stop of init did: nothing reaps or reports the tool's exit
        os.kill(pid, signal.SIGSTOP)
    thread.join()
    # a call that waited on the stopped init would end at its 6 s timeout as tool_timed_out, not ok
    assert result["r"].ok and result["r"].output == {"slept": 1.0, "size": None}, result["r"].error


@needs_pidfd_exit
def test_a_tool_exiting_with_130_is_an_exit_status_not_a_signal(runner: Runner) -> None:
    result = runner.call(hostile_call("sleepy", {"exit": 130}))
    assert result.error is not None
    err = result.error.model_dump()
    assert (err["code"], err["reason"], err["exit_code"]) == ("tool_failed", "exit", 130)
    assert "signal" not in err


@pytest.mark.parametrize(
    ("base", "says"),
    [
        (0, "the VMs' uid range 0..9 is not usable (never root)"),
        (65530, "the VMs' uid range 65530..65539 holds the host user nobody (65534): choose another"),
        (165530, "the VMs' uid range 165530..165539 overlaps alice's subordinate ids in "),
    ],
)
def test_a_uid_range_with_root_a_host_user_or_subordinate_ids_is_refused(
    base: int, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subuid = tmp_path / "subuid"
    subuid.write_text("alice:100000:65536\nbob:165536:65536\n")
    monkeypatch.setattr(uids, "SUBORDINATE", (subuid,))
    with pytest.raises(VmError) as caught:
        uids.UidPool(base, 10)
    assert caught.value.reason == "no_slot" and caught.value.message.startswith(says)
    pool = uids.UidPool(base + 200_000_000, 10, ranges_dir=tmp_path / "ranges")
    assert pool.take() == base + 200_000_000
    pool.close()


def test_nodes_on_one_host_never_share_a_vm_uid(tmp_path: Path) -> None:
    ranges = tmp_path / "ranges"
    base = 1_950_000_000
    first = uids.UidPool(base, 12, ranges_dir=ranges)
    second = uids.UidPool(base + 5, 12, ranges_dir=ranges)  # overlaps the first: drawn just above it
    third = uids.UidPool(base, 12, ranges_dir=ranges)  # the same base: above both
    assert (first.base, second.base, third.base) == (base, base + 12, base + 24)
    taken = [{p.take() for _ in range(12)} for p in (first, second, third)]
    assert not (taken[0] & taken[1]) and not (taken[1] & taken[2]) and not (taken[0] & taken[2])
    # a range given back (its node stopped or died: the lock goes with the process) is drawn again
    first.close()
    again = uids.UidPool(base, 12, ranges_dir=ranges)
    assert again.base == base
    assert sorted(p.name for p in ranges.iterdir() if not p.name.startswith(".")) == sorted(
        f"{b}-12" for b in (base, base + 12, base + 24)
    )
    for pool in (second, third, again):
        pool.close()
    # files nobody holds are a dead node's: removed at the next draw
    uids.UidPool(base + 1_000, 4, ranges_dir=ranges).close()
    assert [p.name for p in ranges.iterdir() if not p.name.startswith(".")] == [f"{base + 1_000}-4"]
