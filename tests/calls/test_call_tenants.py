"""An organization's calls share one VM's CPU weight on their node, however many it runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from workers import PATIENCE_S

from node.vm.cgroups import FULL_SHARE

from .calltest import call, vm_processes
from .stack import FREE, Stack

FAIL = f"{FREE}/fail@1"


def _cpu_weight(pid: int) -> int:
    """The CPU weight of the cgroup a process sits in (cgroup v1 `cpu.shares`, or v2 `cpu.weight`)."""
    groups = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        groups.update(dict.fromkeys(controllers.split(","), path))
    group, name = (
        (Path(f"/sys/fs/cgroup/cpu{groups['cpu']}"), "cpu.shares")
        if "cpu" in groups
        else (
            Path(f"/sys/fs/cgroup{groups['']}"),
            "cpu.weight",
        )
    )
    return int((group / name).read_text())


def _weights(stack: Stack, text: str, count: int) -> list[int]:
    """The CPU weights of the `count` VM commands holding `text`, once that many run."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        pids = [pid for pid, command in vm_processes(stack).items() if command.startswith(text)]
        if len(pids) == count:
            return [_cpu_weight(pid) for pid in pids]
        assert time.monotonic() < deadline, f"{len(pids)} VMs run {text!r}, not {count}"
        time.sleep(0.02)


def test_an_organizations_calls_share_one_vms_cpu_weight(
    stack: Stack,
) -> None:
    busy, quiet = stack.org(), stack.org()
    answers: list[httpx.Response] = []
    sends = [(busy, 3), (busy, 3), (busy, 3), (quiet, 4)]
    threads = [
        threading.Thread(
            target=lambda o=o, s=s: answers.append(call(stack, o, FAIL, {"mode": "sleep", "seconds": s}))
        )
        for o, s in sends
    ]
    for thread in threads:
        thread.start()
    try:
        full = FULL_SHARE[1 if Path("/sys/fs/cgroup/cpu/cpu.shares").exists() else 2][1]
        # each of busy's 3 weighs a third of quiet's one
        assert _weights(stack, "sleep 3 ", 3) == [round(full / 3)] * 3
        assert _weights(stack, "sleep 4 ", 1) == [full]
    finally:
        for thread in threads:
            thread.join(timeout=30)
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
