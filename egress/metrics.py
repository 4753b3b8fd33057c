"""The egress proxy's Prometheus metrics (served at `/metrics`, telemetry.scrape; docs/operations.md).

    b3os_egress_requests_total{outcome}      fetch requests: ok (the upstream answered, any status), an
                                             egress error reason (egress.errors.REASONS), invalid_request,
                                             unauthorized, internal
    b3os_egress_request_duration_seconds     fetch requests answered, request to answer

No host, URL, organization or connection is a label. Each app has its own registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector

from egress.errors import REASONS

OUTCOMES = frozenset({"ok", "invalid_request", "unauthorized", "internal", *REASONS})
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class EgressMetrics:
    """The registry of one proxy app and its metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(namespace="b3os_egress", registry=self.registry)
        self.requests = Counter(
            "b3os_egress_requests", "Fetch requests, by outcome.", ["outcome"], registry=self.registry
        )
        self.seconds = Histogram(
            "b3os_egress_request_duration_seconds",
            "Seconds from a fetch request to its answer.",
            buckets=BUCKETS,
            registry=self.registry,
        )

    def answered(self, outcome: str) -> None:
        """Count one fetch request."""
        self.requests.labels(outcome if outcome in OUTCOMES else "other").inc()
