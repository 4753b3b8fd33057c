"""The api's Prometheus metrics (served at `/metrics`, telemetry.scrape; docs/operations.md).

    b3os_calls_total{surface, tier, outcome, code}     every answered call (not replays)
    b3os_call_replays_total{surface}                    answers replayed from an Idempotency-Key
    b3os_call_duration_seconds{tier, outcome}           the whole call in this api, request to answer
    b3os_call_phase_seconds{tier, phase}                each phase of the answer's `timings`
    b3os_limit_refusals_total{limit}                    requests refused by a limit (429, 503 node_busy)
    b3os_trigger_deliveries_total{kind, status}         trigger deliveries and events recorded, by what
                                                        became of them (refused, duplicate, ignored, pending)
    b3os_trigger_runs_total{outcome}                    starts of the runs of trigger events (started,
                                                        waiting, failed)

Labels are bounded sets: no organization, key, call id or ref. Each api process has its own registry
(`REGISTRY`); with several processes, scrape each one.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector

from api.calls import errors as call_errors  # noqa: F401  (its classes join the error tree)
from api.calls.answers import Answer
from api.errors import ApiError

REGISTRY = CollectorRegistry()
ProcessCollector(namespace="b3os_api", registry=REGISTRY)
PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

CALLS = Counter(
    "b3os_calls",
    "Action calls answered, by surface (http, mcp, routine), tier (vm, http; none when refused before "
    "the action was known), outcome (ok, invalid, refused, failed) and error code (ok on success).",
    ["surface", "tier", "outcome", "code"],
    registry=REGISTRY,
)
TRIGGER_DELIVERIES = Counter(
    "b3os_trigger_deliveries",
    "Trigger deliveries (one per event of a delivery or polled item) recorded, by trigger kind (webhook, "
    "poll) "
    "and status (refused, duplicate, ignored, pending).",
    ["kind", "status"],
    registry=REGISTRY,
)
TRIGGER_RUNS = Counter(
    "b3os_trigger_runs",
    "Starts of the runs of trigger events, by outcome: started, waiting (past the organization's run limits "
    "or Temporal unreachable: tried again) or failed (refused for good: the reason is on the delivery).",
    ["outcome"],
    registry=REGISTRY,
)
REPLAYS = Counter(
    "b3os_call_replays",
    "Calls answered from the stored answer of their Idempotency-Key.",
    ["surface"],
    registry=REGISTRY,
)
CALL_SECONDS = Histogram(
    "b3os_call_duration_seconds",
    "Seconds from a call's request to its answer in the api, by tier and outcome.",
    ["tier", "outcome"],
    buckets=PHASE_BUCKETS,
    registry=REGISTRY,
)
PHASE_SECONDS = Histogram(
    "b3os_call_phase_seconds",
    "Seconds of each phase of a call's timings (vm: validate start copy unpack run collect delete cost; "
    "http: validate template egress upstream map cost).",
    ["tier", "phase"],
    buckets=PHASE_BUCKETS,
    registry=REGISTRY,
)
REFUSALS = Counter(
    "b3os_limit_refusals",
    "Requests refused by a limit: calls_at_once, starts_per_minute, publisher_prices, key_spend_cap, "
    "node_slots (503 node_busy), auth_failures, runs, key_creations, other.",
    ["limit"],
    registry=REGISTRY,
)

TIERS = frozenset({"vm", "http", "js"})
PHASES = frozenset(
    {"validate", "start", "copy", "unpack", "run", "collect", "delete", "cost", "template", "egress",
     "upstream", "map"}
)  # fmt: skip
_QUOTAS = frozenset({"publisher_prices", "key_spend_cap"})


def _tree_codes() -> frozenset[str]:
    """Every code of the api's error tree (a label must be a bounded set, whatever a node says)."""
    found, todo = {"internal"}, [ApiError]
    while todo:
        cls = todo.pop()
        found.add(cls.code)
        todo.extend(cls.__subclasses__())
    return frozenset(found)


KNOWN_CODES = _tree_codes()


def answered(surface: str, answer: Answer, started: float) -> Answer:
    """Count one answered call and observe its duration and phases; returns the answer unchanged."""
    body: dict[str, Any] = answer.body
    status = answer.status
    error = body.get("error")
    if status < 400 or not isinstance(error, dict):
        tier, outcome, code, timings = body.get("tier"), "ok", "ok", body.get("timings")
    else:
        tier, timings = error.get("tier"), error.get("timings")
        raw = error.get("code")
        code = raw if isinstance(raw, str) and raw in KNOWN_CODES else "other"
        if status in (409, 429, 503):
            outcome = "refused"
            limit = _limit_of(code, error)
            if limit is not None:
                REFUSALS.labels(limit).inc()
        else:
            outcome = "invalid" if status < 500 else "failed"
    tier = tier if tier in TIERS else "none"
    CALLS.labels(surface, tier, outcome, code).inc()
    CALL_SECONDS.labels(tier, outcome).observe(time.perf_counter() - started)
    if isinstance(timings, dict):
        for phase, ms in timings.items():
            if phase in PHASES and isinstance(ms, int | float):
                PHASE_SECONDS.labels(tier, phase).observe(ms / 1000)
    return answer


def replayed(surface: str, answer: Answer) -> Answer:
    """Count an answer replayed from an Idempotency-Key; returns it unchanged."""
    REPLAYS.labels(surface).inc()
    return answer


def _limit_of(code: str, error: dict[str, Any]) -> str | None:
    """Which of our limits refused a call (None: not a limit, e.g. an upstream's 429 or a 503 outage)."""
    reason = error.get("reason")
    if code == "concurrency_limited":
        return "calls_at_once"
    if code == "rate_limited":
        return None if reason == "upstream" else "starts_per_minute"
    if code == "quota_exceeded":
        limit = error.get("limit")
        return limit if limit in _QUOTAS else "other"
    if code == "tool_unavailable" and reason == "node_busy":
        return "node_slots"
    return None


def refused(limit: str) -> None:
    """Count a request refused by a limit outside the call path."""
    REFUSALS.labels(limit).inc()


def refused_request(error: ApiError, route_path: str | None) -> None:
    """Count a 429 answered outside the call path (api.errors tells of each), by its limit or its route."""
    REFUSALS.labels(getattr(error, "limit_kind", None) or refused_route(route_path)).inc()


def refused_route(route_path: str | None) -> str:
    """The limit of an api 429 outside the call path, by its route."""
    if route_path is None:
        return "other"
    if "/runs" in route_path:
        return "runs"
    if route_path.startswith("/v1/keys"):
        return "key_creations"
    return "other"
