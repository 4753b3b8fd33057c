"""The distributed shape (tests/cluster.py): two stateless apis on one PostgreSQL serve one registry, one
idempotency store and one set of limits; runs started on either api complete and list on both."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import loopback
import pytest
from calls.stack import ECHO, FREE, Org
from cluster import NODES, Cluster
from workers import PATIENCE_S

pytestmark = pytest.mark.cluster

SLEEP_REF = f"{FREE}/fail@1"
SLEEP_1S = {"mode": "sleep", "seconds": 1}
ROUTINE = f"""\
name: greet
inputs:
  who: {{type: string}}
steps:
  - id: greet
    uses: {FREE}/echo@1
    with: {{text: "hello ${{{{ inputs.who }}}}"}}
outputs:
  greeting: ${{{{ steps.greet.output.text }}}}
"""


async def _call(
    url: str, org: Org, ref: str, input_: dict[str, Any], *, key: str | None = None
) -> httpx.Response:
    headers = dict(org.headers)
    if key is not None:
        headers["Idempotency-Key"] = key
    async with loopback.async_client(base_url=url, timeout=60) as http:
        return await http.post("/v1/actions/call", headers=headers, json={"ref": ref, "input": input_})


async def _at_once(calls: list[tuple[str, dict[str, Any], str | None]], org: Org) -> list[httpx.Response]:
    """(api url, input, Idempotency-Key) calls of SLEEP_REF, all sent at once."""
    return list(await asyncio.gather(*(_call(url, org, SLEEP_REF, i, key=k) for url, i, k in calls)))


async def test_a_pack_published_through_one_api_is_called_through_the_other(cluster: Cluster) -> None:
    # echo was published through A; each node installed it through its own api (node-b: the blob from B)
    api_a, api_b = cluster.api_urls
    org = cluster.org()
    r = await _call(api_b, org, f"{ECHO}/echo@1", {"text": "across"})
    assert r.status_code == 200, r.text
    assert r.json()["output"] == {"text": "across"}
    assert r.json()["cost"]["total"] > 0
    read = await asyncio.gather(*(_call(api_a, org, f"{ECHO}/echo@1", {"text": "a"}) for _ in range(2)))
    assert [x.status_code for x in read] == [200, 200]


async def test_calls_at_once_run_on_both_nodes_under_one_limit_of_4_over_both_apis(cluster: Cluster) -> None:
    api_a, api_b = cluster.api_urls
    org = cluster.org()
    answers = await _at_once([(url, SLEEP_1S, None) for url in (api_a, api_b) * 3], org)
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * 4 + [429] * 2, [r.text for r in answers]
    refused = [r.json()["error"] for r in answers if r.status_code == 429]
    assert {e["code"] for e in refused} == {"concurrency_limited"}
    assert all(r.headers["Retry-After"] for r in answers if r.status_code == 429)
    ran = cluster.calls_of(org)
    assert len(ran) == 4
    assert {c.node_id for c in ran} == set(NODES)  # the least loaded node: two calls on each


async def test_an_idempotent_call_sent_to_both_apis_at_once_runs_once(cluster: Cluster) -> None:
    api_a, api_b = cluster.api_urls
    org = cluster.org()
    key = f"order-{uuid.uuid4().hex[:8]}"
    answers = await _at_once([(url, SLEEP_1S, key) for url in (api_a, api_b, api_a, api_b)], org)
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert len({r.json()["call_id"] for r in answers}) == 1
    assert sorted(r.headers.get("Idempotent-Replayed", "") for r in answers) == ["", "true", "true", "true"]
    assert len(cluster.calls_of(org)) == 1


async def test_runs_started_on_either_api_complete_and_both_apis_list_them(cluster: Cluster) -> None:
    api_a, api_b = cluster.api_urls
    org = cluster.runner()
    stored = await cluster.store(org, ROUTINE, url=api_a)
    assert stored.status_code == 201, stored.text
    runs = {
        await cluster.start_run(org, "greet", {"who": "a"}, url=api_a): "hello a",
        await cluster.start_run(org, "greet", {"who": "b"}, url=api_b): "hello b",
    }
    # listed before anyone reads a run: the statuses come from Temporal's visibility, on either api
    for url in (api_a, api_b):
        assert await _listed_until_done(url, org) == dict.fromkeys(runs, "succeeded")
    for run_id, greeting in runs.items():  # each read through the api that did not start it
        run = await cluster.final(org, run_id, url=api_b if greeting == "hello a" else api_a)
        assert run["status"] == "succeeded" and run["outputs"] == {"greeting": greeting}


async def _listed_until_done(url: str, org: Org, timeout_s: float = PATIENCE_S) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    async with loopback.async_client(base_url=url, timeout=30) as http:
        while True:
            r = await http.get("/v1/runs", headers=org.headers)
            assert r.status_code == 200, r.text
            listed = {run["run_id"]: run["status"] for run in r.json()["runs"]}
            if set(listed.values()) == {"succeeded"} or time.monotonic() > deadline:
                return listed
            await asyncio.sleep(0.2)
