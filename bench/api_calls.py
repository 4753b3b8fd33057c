"""Action call latency and throughput through the api: `POST /v1/actions/call` end to end.

Starts the call tests' stack (two api processes on one SQLite file, one node process with bwrap VMs,
the echo tool published as priced, 1 USD and free packs) and prints, in milliseconds (median, p95):

- noop one at a time: the whole request, the node's phases (start..delete), and the rest (the api:
  auth, resolve, validation, admission, node HTTP, metering; "api" below);
- echo with a 6-byte file one at a time;
- an idempotent replay (same key, stored answer);
- calls per second with 2 organizations x 4 calls at once over both api processes (8 = one node full).

Run: `.venv/bin/python -m bench api_calls [--calls N]` (root; needs the node's base template).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
PHASES = ("start", "copy", "unpack", "run", "collect", "delete")


def _stats(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values):7.1f}  p95 {p95:7.1f}"


def _timed(
    client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, Any]
) -> tuple[float, Any]:
    began = time.perf_counter()
    r = client.post(f"{url}/v1/actions/call", headers=headers, json=body)
    elapsed = (time.perf_counter() - began) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"call failed: {r.status_code} {r.text[:300]}")
    return elapsed, r.json()


def api_throughput(stack: Any, noop: dict[str, Any], per_worker: int) -> tuple[int, float]:
    """`noop` called by 8 threads at once, `per_worker` calls each, for two new organizations over the
    stack's two api processes (half each): the calls answered 200 and the seconds they took."""
    orgs = [stack.org() for _ in range(2)]

    def worker(i: int) -> int:
        done = 0
        with httpx.Client(timeout=120) as c:
            for _ in range(per_worker):
                r = c.post(f"{stack.api_urls[i % 2]}/v1/actions/call", headers=orgs[i % 2].headers, json=noop)
                done += r.status_code == 200
        return done

    began = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        ok = sum(pool.map(worker, range(8)))
    return ok, time.perf_counter() - began


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench api_calls")
    parser.add_argument("--calls", type=int, default=100, help="calls per measurement (default 100)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    from calls.stack import ECHO, FREE, start_stack  # the tests' stack: real processes only

    root = Path(tempfile.mkdtemp(prefix="b3os-bench-calls-"))
    stack = start_stack(root)
    try:
        org = stack.org()
        with httpx.Client(timeout=120) as client:
            noop = {"ref": f"{FREE}/noop@1", "input": {}}
            for _ in range(5):
                _timed(client, stack.url, org.headers, noop)  # warm up pools and connections
            total, node, api = [], [], []
            for _ in range(args.calls):
                org = stack.org()  # a fresh org each time keeps far from 120 starts a minute
                ms, body = _timed(client, stack.url, org.headers, noop)
                phases = sum(body["timings"][p] for p in PHASES)
                total.append(ms)
                node.append(phases)
                api.append(ms - phases)
            print(f"noop, one at a time ({args.calls} calls), ms")
            print(f"  request        {_stats(total)}")
            print(f"  node phases    {_stats(node)}")
            print(f"  api + HTTP     {_stats(api)}")
            echo = {
                "ref": f"{ECHO}/echo@1",
                "input": {"text": "hi", "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}},
            }
            echo_ms = []
            for _ in range(args.calls):
                ms, _ = _timed(client, stack.url, stack.org().headers, echo)
                echo_ms.append(ms)
            print(f"echo with a file, one at a time: {_stats(echo_ms)}")
            replay_org = stack.org()
            headers = {**replay_org.headers, "Idempotency-Key": "bench"}
            _timed(client, stack.url, headers, noop)
            replay = [_timed(client, stack.url, headers, noop)[0] for _ in range(args.calls)]
            print(f"idempotent replay:               {_stats(replay)}")
        per_worker = max(1, min(args.calls // 8, 14))  # 8 workers x 14 < 120 starts a minute per org
        ok, elapsed = api_throughput(stack, noop, per_worker)
        print(
            f"throughput, 2 orgs x 4 at once over 2 api processes: {ok} calls in {elapsed:.2f} s = "
            f"{ok / elapsed:.1f} calls/s"
        )
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
