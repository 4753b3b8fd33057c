"""Hostile tools in real VMs: each ends in the right error, leaves nothing behind, and others keep running."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from nodetest import echo_call, hostile_call, leftovers, wait_started
from timeouts import is_timeout_sentence

from node.models import NodeCallResult
from node.runner import Runner
from node.vm.bwrap import BwrapDriver


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _err(result: NodeCallResult) -> dict:
    assert result.error is not None, result.output
    return result.error.model_dump()


def test_a_tool_cannot_reach_a_host_listener_on_loopback(runner: Runner) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        result = runner.call(hostile_call("network", {"port": listener.getsockname()[1]}))
        assert result.ok, result.error
        assert result.output == {"reached": "ConnectionRefusedError"}
        with pytest.raises(TimeoutError):
            listener.accept()


def test_allocating_1_gib_is_killed_at_the_vms_512_mib(runner: Runner) -> None:
    result = runner.call(hostile_call("alloc"))
    err = _err(result)
    assert (err["code"], err["reason"], err["signal"]) == ("tool_failed", "signal", 9)
    assert "all of the VM's 512 MiB of memory" in err["message"]
    assert result.ran and result.usage["gib_ms"] >= 1


def test_a_fork_bomb_stops_at_the_pids_limit(runner: Runner) -> None:
    err = _err(runner.call(hostile_call("forkbomb")))
    assert (err["code"], err["reason"], err["tool_code"]) == ("tool_failed", "tool_error", "fork_failed")
    made = int(err["tool_message"].split("after ")[1].split(" ")[0])
    assert 10 < made < 64


def test_a_cpu_spin_times_out_and_gets_one_vcpu_only(runner: Runner) -> None:
    result = runner.call(hostile_call("spin", timeout_ms=1000))
    assert _err(result)["code"] == "tool_timed_out"
    assert is_timeout_sentence(_err(result)["message"], 1000)
    # two spinning processes on a 2-core machine, held to one vCPU by the CFS quota (less when the
    # machine is busy with other work)
    assert 100 <= result.usage["vcpu_ms"] <= 1300


def test_filling_the_disk_stops_at_work_and_out_sizes(runner: Runner) -> None:
    result = runner.call(hostile_call("diskfill"))
    assert result.ok, result.error
    assert result.output is not None
    assert 32 << 20 <= result.output["work"] <= 64 << 20
    assert result.output["out"] <= 1 << 20


def test_ten_mib_of_stdout_is_output_too_large(runner: Runner) -> None:
    err = _err(runner.call(hostile_call("bigout")))
    assert (err["code"], err["reason"]) == ("tool_failed", "output_too_large")
    assert err["message"] == "the tool wrote more than 1048576 bytes to stdout"


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("symlink", "output file /out/file is not a regular file (a symlink?)"),
        ("host_symlink", "output file /out/file is not a regular file (a symlink?)"),
        ("dir", "output file /out/file is a directory"),
        ("fifo", "output file /out/file is not a regular file"),
        ("outside", "output.file.path '/etc/hostname' is not a file directly under /out"),
        ("traversal", "output file /out/../etc/hostname is not a file name directly under /out"),
        ("missing", "output file /out/nothing-here does not exist"),
        ("too_big", "output files pass 262144 bytes in all (at /out/part2)"),
    ],
)
def test_an_output_file_that_is_not_a_regular_file_under_out_is_refused(
    runner: Runner, kind: str, says: str
) -> None:
    err = _err(runner.call(hostile_call("badfile", {"kind": kind})))
    assert (err["code"], err["reason"], err["message"]) == ("tool_failed", "output_file", says)


@pytest.mark.parametrize("stdout", ["close", "keep"])
def test_a_daemon_does_not_outlive_the_call(runner: Runner, driver: BwrapDriver, stdout: str) -> None:
    # a call that waited for its daemon, or for the end of the stdout the daemon keeps, would time out
    result = runner.call(hostile_call("daemon", {"stdout": stdout}))
    assert result.ok and result.output == {"left": "a daemon"}
    assert leftovers(driver) == []  # killed once the call has answered, with the VM's other processes


def test_a_tool_sees_no_host_file_no_node_secret_and_no_other_process(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("B3OS_NODE_CREDENTIAL", "node-secret-value")
    paths = [
        "/etc/hostname",
        "/proc/self/uid_map",
        "/root/.b3os/base/rootfs/.b3os-base.json",
        __file__,
        "/proc/cmdline",
        "/etc/resolv.conf",
        "/proc/1/mem",
        "/proc/self/cgroup",
    ]
    result = runner.call(hostile_call("readhost", {"paths": paths}))
    assert result.ok and result.output is not None, result.error
    out = result.output
    assert set(out["env"]) <= {"PATH", "HOME", "LANG", "PWD"}
    assert (out["env"]["HOME"], out["env"]["LANG"], out["cwd"]) == ("/work", "C.UTF-8", "/work")
    assert (out["uid"], out["gid"], out["hostname"]) == (1000, 1000, "vm")
    assert "node-secret-value" not in str(out) and "B3OS" not in str(out)
    assert out["files"][__file__] == "error: FileNotFoundError"
    assert out["files"]["/root/.b3os/base/rootfs/.b3os-base.json"].startswith("error: ")
    uid_map = out["files"]["/proc/self/uid_map"].split()
    assert (len(uid_map), uid_map[0], uid_map[2]) == (3, "1000", "1")  # one uid mapped: 1000
    assert len(out["pids"]) <= 3  # the VM's init, the tool, maybe a reaper: no host process
    # /tool is the tool's own tree (the pool's launcher under it is hidden), read-only like /in
    assert out["tool"] == ["run"]
    # the VM's init (its memory, its fds: the node's status pipe) is hidden, and the host's kernel command
    # line and resolver are not shown
    assert out["writes"] == {
        "/tool/new-file": "EROFS",
        "/in/new-file": "EROFS",
        "/proc/1/mem": "EROFS",  # (no such file, on a read-only mount)
        "/proc/1/fd/1": "ENOENT",
    }
    assert out["files"]["/proc/1/mem"] == "error: FileNotFoundError"
    assert out["files"]["/proc/cmdline"] == ""
    # its cgroup namespace is rooted at its own group: no host group, node pid or VM id
    groups = out["files"]["/proc/self/cgroup"].splitlines()
    assert groups and all(line.endswith(":/") for line in groups), groups
    assert out["files"]["/etc/resolv.conf"] == "# a VM has no network, so no resolver\n"
    assert out["fds"] == [0, 1, 2, 3]  # stdin, stdout, stderr and the listing's own: nothing of the node


def test_other_calls_keep_running_while_hostile_tools_misbehave(runner: Runner, driver: BwrapDriver) -> None:
    results: dict[str, NodeCallResult] = {}

    def run(name: str, timeout_ms: int) -> None:
        results[name] = runner.call(hostile_call(name, timeout_ms=timeout_ms))

    threads = [
        threading.Thread(target=run, args=(n, ms))
        for n, ms in [("spin", 4000), ("forkbomb", 5000), ("alloc", 8000)]
    ]
    for t in threads:
        t.start()
    # the spin and the allocation run for seconds; the fork bomb ends within ~0.3 s of its start, which a
    # busy machine may not let this process see (its outcome below says it ran)
    assert wait_started(driver, "/tool/run", vms=2), "the hostile tools did not start"
    for _ in range(5):
        noop = runner.call(echo_call("noop", {}))
        assert noop.ok, noop.error
    for t in threads:
        t.join()
    assert {n: _err(r)["code"] for n, r in results.items()} == {
        "spin": "tool_timed_out",
        "forkbomb": "tool_failed",
        "alloc": "tool_failed",
    }


def test_a_tools_error_message_arrives_capped_and_without_control_characters(runner: Runner) -> None:
    err = _err(runner.call(hostile_call("noisy", {"kind": "loud_message"})))
    assert (err["code"], err["reason"], err["tool_code"]) == ("tool_failed", "tool_error", "loud")
    message = err["tool_message"]
    assert len(message) == 1000 and message.endswith("…")
    assert message.startswith("[31mred ]0;title   next line xxx")
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in message + err["message"])


def test_an_output_file_error_arrives_capped_and_without_control_characters(runner: Runner) -> None:
    err = _err(runner.call(hostile_call("noisy", {"kind": "loud_path"})))
    assert (err["code"], err["reason"]) == ("tool_failed", "output_file")
    message = err["message"]
    assert len(message) == 1000 and message.endswith("…")
    assert message.startswith("output file /out/ [2J evil b3os call: ok xxx")
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch == "\u202e" for ch in message)


def test_a_tool_error_code_that_is_no_short_name_is_a_protocol_failure(runner: Runner) -> None:
    err = _err(runner.call(hostile_call("noisy", {"kind": "bad_code"})))
    assert (err["code"], err["reason"]) == ("tool_failed", "protocol")
    assert "error code is not a short name" in err["message"] and "\x1b" not in json.dumps(err)


@pytest.mark.parametrize("kind", ["surrogate_output", "surrogate_message", "deep", "deepest"])
def test_an_answer_that_cannot_travel_as_json_is_a_protocol_failure_of_the_tool(
    runner: Runner, kind: str
) -> None:
    result = runner.call(hostile_call("noisy", {"kind": kind}))
    err = _err(result)
    assert (err["code"], err["reason"]) == ("tool_failed", "protocol"), err
    assert result.ran  # the tool ran: its time is billed as a failed call's
    json.dumps(result.model_dump(mode="json"), ensure_ascii=False).encode()  # the node's answer travels


def test_only_properties_declared_as_files_become_files(runner: Runner) -> None:
    call = hostile_call("noisy", {"kind": "undeclared_file"})
    declared = call.model_copy(update={"output_file_fields": []})
    result = runner.call(declared)
    assert result.ok, result.error
    assert result.output == {"note": {"path": "/out/secret.txt"}}  # left as the tool wrote it: no bytes read
