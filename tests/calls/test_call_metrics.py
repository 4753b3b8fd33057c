"""Prometheus `/metrics` on the real processes: the api's calls, phases and limit refusals, the node's
slots and pool, the egress proxy's requests, and who may read them (loopback or the metrics token)."""

from __future__ import annotations

import re

import loopback
from sqlmodel import Session, col, select

from api.models import Node

from .calltest import call, error
from .stack import ECHO, Stack
from .test_call_http import BERLIN, SEARCH, json_reply

TOKEN = "metrics-token-calls-test"


def scrape(url: str, **headers: str) -> dict[str, float]:
    """`GET {url}/metrics` as `{'name{labels}': value}`."""
    r = loopback.get(f"{url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    samples: dict[str, float] = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def sample(samples: dict[str, float], name: str, **labels: str) -> float:
    """The value of the series `name` whose labels include `labels` (0 when there is none)."""
    for key, value in samples.items():
        metric, _, rest = key.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if metric == name and all(found.get(k) == v for k, v in labels.items()):
            return value
    return 0.0


def node_url(stack: Stack, node_id: str) -> str:
    with Session(stack.engine) as session:
        node = session.exec(select(Node).where(col(Node.node_id) == node_id)).one()
        return node.url


def test_the_api_counts_calls_by_tier_outcome_and_code_with_their_phases(stack: Stack) -> None:
    before = scrape(stack.url)
    org = stack.org()
    assert call(stack, org, f"{ECHO}/echo@1", {"text": "hi"}).status_code == 200
    error(call(stack, org, f"{ECHO}/echo@1", {"nope": 1}), 400, "invalid_request")
    after = scrape(stack.url)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("b3os_calls_total", surface="http", tier="vm", outcome="ok", code="ok") == 1
    assert (
        grew("b3os_calls_total", surface="http", tier="none", outcome="invalid", code="invalid_request") == 1
    )
    for phase in ("validate", "start", "copy", "unpack", "run", "collect", "delete"):
        assert grew("b3os_call_phase_seconds_count", tier="vm", phase=phase) == 1, phase
    assert grew("b3os_call_duration_seconds_count", tier="vm", outcome="ok") == 1
    assert sample(after, "b3os_api_process_resident_memory_bytes") > 0
    assert not any(org.org_id in key or org.key_id in key for key in after)  # no organization in a label


def test_a_refused_call_counts_as_a_limit_refusal_of_its_kind(stack: Stack) -> None:
    org = stack.org(cap=100)  # below one tool call's floor
    before = scrape(stack.url)
    err = error(call(stack, org, f"{ECHO}/noop@1"), 429, "quota_exceeded")
    assert err["limit"] == "key_spend_cap"
    after = scrape(stack.url)
    refusals = sample(after, "b3os_limit_refusals_total", limit="key_spend_cap")
    assert refusals - sample(before, "b3os_limit_refusals_total", limit="key_spend_cap") == 1
    labels = {"surface": "http", "tier": "none", "outcome": "refused", "code": "quota_exceeded"}
    assert sample(after, "b3os_calls_total", **labels) - sample(before, "b3os_calls_total", **labels) == 1


def test_the_node_shows_its_slots_and_its_pool(stack: Stack) -> None:
    org = stack.org()
    assert call(stack, org, f"{ECHO}/echo@1", {"text": "hi"}).status_code == 200
    samples = scrape(node_url(stack, "node-a"))
    assert sample(samples, "b3os_node_slots") == 8
    assert sample(samples, "b3os_node_slots_in_use") >= 0
    assert 0 <= sample(samples, "b3os_node_pool_ready") <= sample(samples, "b3os_node_pool_size")
    assert sample(samples, "b3os_node_calls_total", outcome="ok") >= 1
    assert sample(samples, "b3os_node_call_duration_seconds_count") >= 1


def test_the_egress_proxy_counts_its_requests_by_outcome(stack: Stack) -> None:
    assert stack.egress is not None
    stack.upstreams["geocoding-api.open-meteo.com"].on(
        "/v1/search", json_reply({"results": [BERLIN], "generationtime_ms": 0.5})
    )
    before = scrape(stack.egress.url)
    assert call(stack, stack.org(), SEARCH, {"name": "Berlin"}).status_code == 200
    after = scrape(stack.egress.url)
    ok = "b3os_egress_requests_total"
    assert sample(after, ok, outcome="ok") - sample(before, ok, outcome="ok") == 1
    assert sample(after, "b3os_egress_request_duration_seconds_count") >= 1


def test_metrics_are_refused_to_a_proxied_reader_without_the_token(stack: Stack) -> None:
    for url in (stack.url, node_url(stack, "node-a"), stack.egress.url if stack.egress else ""):
        r = loopback.get(f"{url}/metrics", headers={"X-Forwarded-For": "203.0.113.7"}, timeout=10)
        assert r.status_code == 401, (url, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        assert "b3os_" not in r.text


def test_the_metrics_token_opens_metrics_to_any_reader(stack: Stack) -> None:
    url, proc = stack.start_api(extra_env={"B3OS_METRICS_TOKEN": TOKEN}, listed=False)
    try:
        proxied = {"X-Forwarded-For": "203.0.113.7"}
        assert loopback.get(f"{url}/metrics", headers=proxied, timeout=10).status_code == 401
        wrong = {**proxied, "Authorization": "Bearer not-the-token"}
        assert loopback.get(f"{url}/metrics", headers=wrong, timeout=10).status_code == 401
        samples = scrape(url, **proxied, Authorization=f"Bearer {TOKEN}")
        assert "b3os_api_process_cpu_seconds_total" in samples
    finally:
        proc.stop()
