"""The seed's curl example and the shape of an action result."""

from __future__ import annotations

import loopback

from .stack import Stack

SEED_BODY = {
    "ref": "com.example.tools/echo/echo@1",
    "input": {"text": "hi", "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}},
}


def test_the_seed_example_answers_hi_and_hello_txt(stack: Stack) -> None:
    org = stack.org()
    r = loopback.post(
        f"{stack.url}/v1/actions/call",
        headers={**org.headers, "Content-Type": "application/json"},
        json=SEED_BODY,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tier"] == "vm"
    assert body["ref"] == "com.example.tools/echo/echo@1.0.0"
    assert body["output"] == {
        "text": "hi",
        "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"},
    }
    cost = body["cost"]
    assert cost["floor"] == 10 and cost["price"] == 100
    assert cost["total"] == cost["compute"] + cost["floor"] + cost["price"]
    assert set(body["timings"]) == {"validate", "start", "copy", "unpack", "run", "collect", "delete", "cost"}
    assert body["call_id"].startswith("tcall_")
