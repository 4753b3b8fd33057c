"""Node call latency and throughput of a no-op tool, bare vs. through the VM driver vs. over HTTP.

The tool is the echo tool's `noop` (a POSIX sh script, `--tool sh`, the default) or a Python json-stdio
script that answers `{"output": {}}` (`--tool python`, run by the base's /usr/bin/python3).

Prints per-phase latency (median and p95, ms) and calls per second for:
- bare: `subprocess.run` of the echo tool's script on the host (no isolation);
- driver: `Runner.call` through the bwrap driver (a fresh VM per call from the pool of VMs started ahead,
  refilled in the background while the calls run), one at a time and 8 at once;
- http: `POST /v1/node/calls` to a real node process (`b3os node run`), one at a time and 8 at once.

Run: `.venv/bin/python -m bench node_calls [--calls N] [--tool sh|python] [--no-http]` (root; builds the
base template if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from node.cache import InstallCache
from node.config import Settings
from node.credential import call_key, new_secret, signed_headers
from node.models import NodeCall
from node.runner import Runner
from node.template import build_base, rootfs_path
from node.vm.bwrap import BwrapDriver
from packs.archive import build_archive

REPO = Path(__file__).resolve().parent.parent
ECHO_TOOL = REPO / "examples" / "tools" / "echo" / "tool"
PACK, VERSION = "com.example.tools/echo", "1.0.0"
PY_PACK = "com.example.bench/pynoop"
PY_TOOL = """#!/usr/bin/python3
import json
import sys

json.load(sys.stdin)
print(json.dumps({"output": {}}))
"""
NODE_ID = "bench-node"
NODE_SECRET = new_secret()  # the bench's own node credential (the node needs no api to check proofs)
REQUEST = {
    "action": "noop",
    "input": {},
    "limits": {"timeoutMs": 10000, "maxOutputBytes": 262144},
    "call": {"id": "b"},
}


def _call(i: int, tool: str = "sh") -> NodeCall:
    pack, cmd = (PACK, ["/tool/bin/echo-tool", "noop"]) if tool == "sh" else (PY_PACK, ["/tool/bin/noop"])
    return NodeCall(
        call_id=f"tcall_bench_{i}", pack=pack, version=VERSION, action="noop",
        cmd=cmd, timeout_ms=10_000, input={},
    )  # fmt: skip


def _install(cache: InstallCache, tmp: Path) -> tuple[Path, Path]:
    """Install the echo tool and the Python no-op tool; return their unpacked trees."""
    data, st = build_archive(ECHO_TOOL)
    echo = cache.install_archive(PACK, VERSION, data, fmt="tar", max_unpacked_bytes=st.unpacked_bytes,
                                 max_entries=st.entries)  # fmt: skip
    tree = tmp / "pynoop"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "noop").write_text(PY_TOOL)
    (tree / "bin" / "noop").chmod(0o755)
    data, st = build_archive(tree)
    py = cache.install_archive(PY_PACK, VERSION, data, fmt="tar", max_unpacked_bytes=st.unpacked_bytes,
                               max_entries=st.entries)  # fmt: skip
    return echo, py


def _stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _timed(fn: Callable[[int], object], n: int, workers: int) -> tuple[list[float], float]:
    """Latencies (ms) of n calls of fn, and calls per second, with `workers` at once."""

    def one(i: int) -> float:
        t = time.perf_counter()
        fn(i)
        return (time.perf_counter() - t) * 1000

    started = time.perf_counter()
    if workers == 1:
        lat = [one(i) for i in range(n)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            lat = list(pool.map(one, range(n)))
    return lat, n / (time.perf_counter() - started)


def _row(name: str, lat: list[float], rate: float) -> str:
    med, p95 = _stats(lat)
    return f"{name:<28}{med:>10.1f}{p95:>10.1f}{rate:>12.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench node_calls")
    parser.add_argument("--calls", type=int, default=200, help="calls per measurement (default 200)")
    parser.add_argument("--tool", choices=("sh", "python"), default="sh", help="the no-op tool (default sh)")
    parser.add_argument("--no-http", action="store_true", help="skip the node-over-HTTP rows")
    args = parser.parse_args(argv)
    n = args.calls
    settings = Settings()
    base = build_base(settings.base_dir)
    tmp = Path(tempfile.mkdtemp(prefix="b3os-bench-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    cache = InstallCache(tmp / "cache")
    echo, py = _install(cache, tmp)
    bare_cmd = (
        [str(echo / "bin/echo-tool"), "noop"]
        if args.tool == "sh"
        else ["/usr/bin/python3", str(py / "bin/noop")]
    )
    stdin = json.dumps(REQUEST).encode()
    rows: list[str] = []
    try:

        def bare(i: int) -> None:
            subprocess.run(bare_cmd, input=stdin, capture_output=True, check=True)

        _timed(bare, 10, 1)
        lat_bare, rate_bare = _timed(bare, n, 1)
        rows.append(_row("bare subprocess.run", lat_bare, rate_bare))
        _, rate_bare8 = _timed(bare, n, 8)
        rows.append(_row("bare, 8 at once", lat_bare, rate_bare8))

        driver = BwrapDriver(base_rootfs=base if base.name == "rootfs" else rootfs_path(settings.base_dir),
                             run_dir=tmp / "vms", pool_size=4)  # fmt: skip
        runner = Runner(driver, cache)
        phases: dict[str, list[float]] = {}

        def via_driver(i: int) -> None:
            result = runner.call(_call(i, args.tool))
            assert result.ok, result.error
            for k, v in result.timings.items():
                phases.setdefault(k, []).append(v)

        _timed(via_driver, 10, 1)
        phases.clear()
        lat_drv, rate_drv = _timed(via_driver, n, 1)
        phase_rows = [_row(f"  phase {k}", v, 0.0)[:-12] for k, v in phases.items()]
        rows.append(_row("driver (bwrap+cgroups)", lat_drv, rate_drv))
        rows.extend(phase_rows)
        lat_drv8, rate_drv8 = _timed(via_driver, n, 8)
        rows.append(_row("driver, 8 at once", lat_drv8, rate_drv8))
        driver.close()

        if not args.no_http:
            rows.extend(_http_rows(n, tmp, cache, args.tool))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.tool} noop tool, {n} calls each, {os.cpu_count()} CPUs")
    print(f"{'':<28}{'median ms':>10}{'p95 ms':>10}{'calls/s':>12}")
    for row in rows:
        print(row)
    med_bare, med_drv = statistics.median(lat_bare), statistics.median(lat_drv)
    print(f"driver overhead vs bare: {med_drv / med_bare:.2f}x median")
    return 0


def _http_rows(n: int, tmp: Path, cache: InstallCache, tool: str) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "B3OS_NODE_ID": NODE_ID, "B3OS_NODE_CREDENTIAL": NODE_SECRET,
           "B3OS_CACHE_DIR": str(cache.root), "B3OS_RUN_DIR": str(tmp / "node-vms")}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "node", "run", "--port", str(port)], cwd=REPO, env=env
    )
    url = f"http://127.0.0.1:{port}/v1/node/calls"
    key = call_key(NODE_SECRET)

    def signed(method: str, path: str, body: bytes = b"") -> dict[str, str]:
        # as the api signs each request (node.credential): part of what a call costs
        return signed_headers(key, node_id=NODE_ID, method=method, path=path, body=body)

    try:
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=16)) as client:
            for _ in range(300):
                try:
                    client.get(
                        f"http://127.0.0.1:{port}/v1/node/status", headers=signed("GET", "/v1/node/status")
                    )
                    break
                except httpx.TransportError:
                    time.sleep(0.1)

            def via_http(i: int) -> None:
                body = _call(i, tool).model_dump_json().encode()
                resp = client.post(url, content=body, headers=signed("POST", "/v1/node/calls", body))
                assert resp.status_code == 200 and resp.json()["ok"], resp.text

            _timed(via_http, 10, 1)
            lat, rate = _timed(via_http, n, 1)
            lat8, rate8 = _timed(via_http, n, 8)
        return [_row("http node", lat, rate), _row("http node, 8 at once", lat8, rate8)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


if __name__ == "__main__":
    sys.exit(main())
