"""HTTP action latency: the HTTP runtime and the egress proxy against a direct request to the same server.

Starts the call tests' stack (two api processes, a node, the real egress proxy in front of loopback HTTPS
stand-ins of the packs' hosts, a test CA) and measures, one at a time, side by side in one run, in
milliseconds (median, p95):

- direct: an httpx client (keep-alive, the test CA) GETs the stand-in of api.example.com itself;
- proxy: `POST /v1/egress/fetch` of the same request (the proxy's own cost: checks, guarded connect,
  response relay, base64 and JSON);
- runtime + proxy: the `template`, `egress` and `map` phases of `POST /v1/actions/call` of the probe
  pack's `public` action (the same request): what the HTTP runtime and the proxy add, the goal being
  at most 5 ms above direct at p50;
- the whole `POST /v1/actions/call` request (auth, idempotency, admission, metering included).

Run: `.venv/bin/python -m bench http_calls [--calls N]` (root; needs the node's base template).
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
BODY = b'{"ok": true, "items": [1, 2, 3]}'


def _stats(values: list[float]) -> tuple[float, str]:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    median = statistics.median(values)
    return median, f"median {median:7.2f}  p95 {p95:7.2f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench http_calls")
    parser.add_argument("--calls", type=int, default=200, help="requests per measurement (default 200)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "tests" / "egress"))
    from calls.stack import PROBE, start_stack  # the tests' stack: real processes only
    from servers import Reply

    root = Path(tempfile.mkdtemp(prefix="b3os-bench-http-"))
    stack = start_stack(root)
    assert stack.egress is not None
    try:
        upstream = stack.upstreams["api.example.com"]
        upstream.on("/public/bench", Reply(200, [("Content-Type", "application/json")], BODY))
        context = ssl.create_default_context(cafile=str(root / "test-ca.pem"))
        direct_url = "https://api.example.com/public/bench?q=none"
        fetch = {
            "method": "GET",
            "url": direct_url,
            "headers": [],
            "egress": ["api.example.com"],
            "credentials": [],
            "timeout_ms": 5000,
        }
        direct_ms, proxy_ms, runtime_ms, request_ms = [], [], [], []
        fetch_url = f"{stack.egress.url}/v1/egress/fetch"
        # the direct client connects to the stand-in under its real name (SNI, Host), as the proxy does
        named = {"headers": {"Host": "api.example.com"}, "extensions": {"sni_hostname": "api.example.com"}}
        with (
            httpx.Client(verify=context, timeout=30, base_url=f"https://127.0.0.1:{upstream.port}") as direct,
            httpx.Client(timeout=30) as client,
        ):
            for _ in range(10):  # warm up connections and pools
                direct.get("/public/bench", **named)  # type: ignore[arg-type]
                client.post(fetch_url, json=fetch, headers=stack.egress.headers)
            org = stack.org()
            body = {"ref": f"{PROBE}/public@1", "input": {"path": "bench"}}
            for i in range(args.calls):
                began = time.perf_counter()
                r = direct.get("/public/bench", **named)  # type: ignore[arg-type]
                direct_ms.append((time.perf_counter() - began) * 1000)
                assert r.content == BODY
                began = time.perf_counter()
                r = client.post(fetch_url, json=fetch, headers=stack.egress.headers)
                proxy_ms.append((time.perf_counter() - began) * 1000)
                assert r.json()["status"] == 200, r.text
                if i % 100 == 0:
                    org = stack.org()  # a fresh org each 100 calls keeps far from 120 starts a minute
                began = time.perf_counter()
                r = client.post(f"{stack.url}/v1/actions/call", json=body, headers=org.headers)
                request_ms.append((time.perf_counter() - began) * 1000)
                assert r.status_code == 200, r.text
                timings = r.json()["timings"]
                runtime_ms.append(timings["template"] + timings["egress"] + timings["map"])
        d, d_text = _stats(direct_ms)
        p, p_text = _stats(proxy_ms)
        rt, rt_text = _stats(runtime_ms)
        _, req_text = _stats(request_ms)
        print(f"GET of the same HTTPS stand-in, one at a time ({args.calls} each), ms")
        print(f"  direct httpx          {d_text}")
        print(f"  egress proxy fetch    {p_text}   (+{p - d:.2f} ms p50 over direct)")
        print(f"  runtime + proxy       {rt_text}   (+{rt - d:.2f} ms p50 over direct; goal at most +5)")
        print(f"  POST /v1/actions/call {req_text}")
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
