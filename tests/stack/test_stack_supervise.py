"""`b3os dev` keeps its parts up: a part killed with SIGKILL (the node mid-call, the worker, the api,
Temporal's dev server) is restarted and said on stderr, the runs in flight still succeed, and SIGINT
then stops everything (no process, VM directory, mount or cgroup left)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import loopback
import pytest
from workers import PATIENCE_S

from cli.stack import _descendants, port_taken
from cli.supervise import FIRST_DELAY_S, MAX_DELAY_S, Restarts, exit_text, restart_line
from node.vm import mounts
from node.vm.stale import dead_node_cgroups

from .stacktest import Dev, node_status, running, running_dev, wait_until

PARTS = {
    "temporal": "server start-dev",
    "egress": "egress run",
    "api": "api.main:create_app",
    "node": "node run",
    "worker": "engine.worker",
}
NAP = """\
name: nap
description: A step that sleeps 3 s on the node, then an echo.
steps:
  - id: nap
    uses: com.example.tools/echo/fail@1
    with: {mode: sleep, seconds: 3}
  - id: greet
    uses: com.example.tools/echo/echo@1
    with: {text: after the nap}
outputs:
  text: ${{ steps.greet.output.text }}
"""
RUN_DIR = Path("/run/b3os/vms")  # the node's default run dir (b3os dev sets none)


def test_the_restart_delay_doubles_to_the_max_and_resets_after_a_healthy_run() -> None:
    restarts = Restarts()
    delays = [restarts.died(now=t * 100.0, ran_s=1.0) for t in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0] and restarts.count == 7
    assert restarts.died(now=800.0, ran_s=31.0) == FIRST_DELAY_S  # it ran 30 s: healthy again


def test_a_part_dying_five_times_within_a_minute_is_retried_at_the_max_delay_and_said_so() -> None:
    restarts = Restarts()
    delays = [restarts.died(now=float(t), ran_s=0.1) for t in range(5)]
    assert delays == [0.5, 1.0, 2.0, 4.0, MAX_DELAY_S] and restarts.flapping
    line = restart_line("node", 1, restarts, delays[-1], Path("/d/logs/node.log"))
    assert line == (
        "b3os dev: node exited (code 1); restarting in 10 s (restart 5); it died 5 times within a minute "
        "and is retried every 10 s: see /d/logs/node.log"
    )
    assert restarts.died(now=200.0, ran_s=0.1) == MAX_DELAY_S and not restarts.flapping  # the minute passed


def test_an_exit_is_said_as_a_code_or_a_signal() -> None:
    assert exit_text(3) == "code 3" and exit_text(-9) == "signal 9, SIGKILL" and exit_text(-99) == "signal 99"


@pytest.fixture(scope="module")
def dev() -> Iterator[Dev]:
    with running_dev(prefix="b3os-supervise-") as d:
        yield d


def _part_pids(dev: Dev) -> dict[str, int]:
    """The pid of each part, from the command lines of b3os dev's children."""
    found = {}
    for pid in _descendants({dev.process.pid}):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue
        for part, words in PARTS.items():
            if ppid == dev.process.pid and words in cmdline and not _busy_lane(pid):
                found[part] = pid
    return found


def _busy_lane(pid: int) -> bool:
    """Whether the process is the busy lane's worker (the same program as the worker's)."""
    try:
        return b"B3OS_TEMPORAL_TASK_QUEUE=b3os-routines-busy\0" in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _kill_and_see_it_back(dev: Dev, part: str) -> int:
    """SIGKILL the part, see the stderr line, wait for its new process; the new pid."""
    old = _part_pids(dev)[part]
    said = len(dev.err_lines)
    os.kill(old, signal.SIGKILL)
    wait_until(f"{part} restarted", lambda: _part_pids(dev).get(part, old) != old, 30.0)
    line = next(line for line in dev.err_lines[said:] if line.startswith(f"b3os dev: {part} exited"))
    assert line.startswith(f"b3os dev: {part} exited (signal 9, SIGKILL); restarting in ")
    return _part_pids(dev)[part]


def _api_healthy(dev: Dev) -> bool:
    try:
        return loopback.get(f"{dev.api_url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _start_runs(dev: Dev, routine: Path, count: int) -> list[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "cli", "routine", "run", str(routine), "--json"]
    return [
        subprocess.Popen(
            argv, cwd=dev.root, env=dev.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]


def _all_succeeded(runs: list[subprocess.Popen[str]]) -> list[dict[str, object]]:
    answers = []
    for run in runs:
        out, err = run.communicate(timeout=180)
        assert run.returncode == 0, (out, err)
        answers.append(json.loads(out))
    assert [a["status"] for a in answers] == ["succeeded"] * len(runs)
    return answers


def test_a_node_killed_mid_call_is_restarted_and_every_run_in_flight_succeeds(dev: Dev) -> None:
    routine = dev.root / "nap.yaml"
    routine.write_text(NAP)
    node_url, credential = f"http://127.0.0.1:{dev.ports['--node-port']}", dev.dev_env
    runs = _start_runs(dev, routine, 8)

    def calls_in_flight() -> bool:
        status = node_status(node_url, credential).json()
        return int(status["slots_free"]) <= int(status["slots_total"]) - 4

    wait_until("calls in flight on the node", calls_in_flight, 60.0)
    old = _part_pids(dev)["node"]
    new = _kill_and_see_it_back(dev, "node")
    assert "b3os dev: node exited (signal 9, SIGKILL); restarting in 0.5 s (restart 1)" in dev.err_lines
    answers = _all_succeeded(runs)
    assert {str(a["outputs"]) for a in answers} == {str({"text": "after the nap"})}
    # the calls the node lost were answered 503 and retried by Temporal (the same step, a later attempt)
    worker_log = (dev.data_dir / "logs" / "worker.log").read_text(errors="replace")
    assert "step nap attempt 1: com.example.tools/echo/fail@1.0.0 answered 503 tool_unavailable" in worker_log
    assert "nothing was billed" in worker_log
    assert _part_pids(dev)["node"] == new and new != old
    assert not (RUN_DIR / f"node-{old}").exists()  # the new node removed what the killed one left
    assert dead_node_cgroups({old}) == []


def test_a_killed_worker_and_a_killed_api_are_restarted_and_a_run_then_succeeds(dev: Dev) -> None:
    _kill_and_see_it_back(dev, "worker")
    _kill_and_see_it_back(dev, "api")
    wait_until("the api answering again", lambda: _api_healthy(dev), 60.0)
    _all_succeeded(_start_runs(dev, Path(__file__).parents[2] / "examples/routines/hello.yaml", 1))


def test_a_killed_temporal_dev_server_is_restarted_with_its_runs(dev: Dev) -> None:
    routine = dev.root / "nap.yaml"
    routine.write_text(NAP)
    runs = _start_runs(dev, routine, 2)
    time.sleep(2.0)  # the runs are started and their first step is on the node
    _kill_and_see_it_back(dev, "temporal")
    _all_succeeded(runs)


def test_sigint_then_stops_every_part_and_leaves_no_vm_mount_or_cgroup(dev: Dev) -> None:
    node = _part_pids(dev)["node"]
    children = _descendants({dev.process.pid})
    assert set(_part_pids(dev)) == set(PARTS)
    said = len(dev.err_lines)
    dev.process.send_signal(signal.SIGINT)
    assert dev.process.wait(timeout=60) == 0
    deadline = time.monotonic() + PATIENCE_S
    while left := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"processes {left} outlived b3os dev"
        time.sleep(0.02)
    assert [port for port in dev.ports.values() if port_taken(port)] == []
    assert not (RUN_DIR / f"node-{node}").exists()
    assert mounts.mounts_under(RUN_DIR / f"node-{node}") == []
    assert dead_node_cgroups({node}) == []
    time.sleep(0.2)  # the reader thread has the last lines
    assert [line for line in dev.err_lines[said:] if "exited" in line] == []  # a stop is not a death
