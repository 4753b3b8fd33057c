"""The two VM drivers side by side: a noop and an echo call (text and a 6-byte file) of the echo tool, on
the sandbox (bwrap) driver and on the microvm driver, each warm (a VM taken from the pool, which is
refilled between calls) and cold (no pool: the call starts its own VM).

Prints, per driver, mode and action, the median of each phase (ms) over `--calls` calls, and the whole
call; for the microvm driver also its accelerator and the median boot of its VMs, and "hand-over"
(start + copy + unpack: what a warm call waits before its command runs).

Run: `.venv/bin/python -m bench driver_calls [--calls N] [--accel auto|kvm|tcg]` (root; builds the base
template and the guest if missing; with TCG a cold microvm call boots a guest, several seconds: keep
`--calls` small, the default 3 takes about a minute).
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from node.cache import InstallCache
from node.config import Settings
from node.models import NodeCall
from node.runner import Runner
from node.template import build_base
from node.vm.base import PHASES, VmDriver
from node.vm.bwrap import BwrapDriver
from node.vm.guest import build_guest
from node.vm.microvm import MicroVmDriver
from packs.archive import build_archive

REPO = Path(__file__).resolve().parent.parent
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool"
PACK, VERSION = "com.example.tools/echo", "1.0.0"
UID_BASE = 1_950_000_000  # apart from the tests' and a node's default range
INPUTS = {
    "noop": {},
    "echo": {"text": "hi", "file": {"$bytes": base64.b64encode(b"hello\n").decode(), "name": "hello.txt"}},
}


def _call(action: str, i: int) -> NodeCall:
    return NodeCall(
        call_id=f"tcall_bench_{action}_{i}_{time.monotonic_ns()}", pack=PACK, version=VERSION, action=action,
        cmd=["/tool/bin/echo-tool", action], timeout_ms=60_000, input=INPUTS[action],
        file_fields=["file"] if action == "echo" else [],
    )  # fmt: skip


def _settle(driver: VmDriver) -> None:
    end = time.monotonic() + 120
    while driver.pool_ready() < driver.pool_target() and time.monotonic() < end:
        time.sleep(0.05)


def _measure(driver: VmDriver, cache: InstallCache, calls: int) -> dict[str, dict[str, float]]:
    """Median per phase and of the whole call, per action (each call after the pool is full again)."""
    runner = Runner(driver, cache, slots=1)
    out: dict[str, dict[str, float]] = {}
    for action in INPUTS:
        phases: dict[str, list[float]] = {p: [] for p in (*PHASES, "whole")}
        for i in range(calls):
            _settle(driver)
            started = time.perf_counter()
            result = runner.call(_call(action, i))
            if not result.ok:
                raise SystemExit(f"bench driver_calls: {action} failed: {result.error}")
            phases["whole"].append((time.perf_counter() - started) * 1000)
            for name, ms in result.timings.items():
                phases[name].append(ms)
        out[action] = {name: statistics.median(v) for name, v in phases.items() if v}
        out[action]["hand-over"] = sum(out[action].get(p, 0.0) for p in ("start", "copy", "unpack"))
    return out


def _print(title: str, rows: dict[str, dict[str, float]]) -> None:
    cols = [*PHASES, "hand-over", "whole"]
    print(f"\n{title}")
    print(f"{'action':<8}" + "".join(f"{c:>11}" for c in cols))
    for action, values in rows.items():
        print(f"{action:<8}" + "".join(f"{values.get(c, 0.0):>11.1f}" for c in cols))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench driver_calls")
    parser.add_argument("--calls", type=int, default=3, help="calls per action, driver and mode (default 3)")
    parser.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto", help="the microvm's")
    args = parser.parse_args(argv)
    settings = Settings()
    base = build_base(settings.base_dir)
    guest = build_guest(settings.guest_dir, settings.base_dir)
    tmp = Path(tempfile.mkdtemp(prefix="b3os-bench-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    try:
        cache = InstallCache(tmp / "cache")
        data, st = build_archive(ECHO_TOOL)
        cache.install_archive(PACK, VERSION, data, fmt="tar", max_unpacked_bytes=st.unpacked_bytes,
                              max_entries=st.entries)  # fmt: skip
        for pool in (1, 0):
            mode = "warm (pool)" if pool else "cold (no pool)"
            sandbox = BwrapDriver(base_rootfs=base, run_dir=tmp / "vms", pool_size=pool, uid_base=UID_BASE)
            try:
                _print(f"sandbox, {mode}", _measure(sandbox, cache, args.calls))
            finally:
                sandbox.close()
            microvm = MicroVmDriver(guest=guest, run_dir=tmp / "vms", pool_size=pool, uid_base=UID_BASE + 32,
                                    accel=args.accel)  # fmt: skip
            try:
                rows = _measure(microvm, cache, args.calls)
                boot = statistics.median(microvm.boot_ms) if microvm.boot_ms else 0.0
                _print(f"microvm/{microvm.accel}, {mode}: boot {boot:.0f} ms ({microvm.accel_reason})", rows)
            finally:
                microvm.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0
