"""The node's Prometheus metrics (served at `/metrics`, telemetry.scrape; docs/operations.md).

    b3os_node_slots                 calls this node runs at once (its `slots`)
    b3os_node_slots_in_use          calls running now
    b3os_node_pool_ready            VMs prepared ahead, waiting for a call
    b3os_node_pool_size             VMs the pool keeps prepared (`pool_size`)
    b3os_node_vm_boot_seconds       the median boot of the last 64 microVMs (microvm driver only)
    b3os_node_calls_total{outcome}  calls answered: ok, a tool error code, node_busy, invalid_request
    b3os_node_call_duration_seconds calls run, from request to result

The gauges are read when scraped (nothing on the call path); each app has its own registry.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = frozenset(
    {"ok", "tool_failed", "tool_timed_out", "tool_unavailable", "pack_unavailable", "node_busy",
     "invalid_request"}
)  # fmt: skip
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class NodeMetrics:
    """The registry of one node app and its counters."""

    def __init__(self, state: Callable[[], Any]) -> None:
        """`state()` gives the running `NodeState` (None before the app has started)."""
        self.registry = CollectorRegistry()
        ProcessCollector(namespace="b3os_node", registry=self.registry)
        self.registry.register(_Gauges(state))
        self.calls = Counter(
            "b3os_node_calls", "Calls this node answered, by outcome.", ["outcome"], registry=self.registry
        )
        self.seconds = Histogram(
            "b3os_node_call_duration_seconds",
            "Seconds from a call's request to its result on this node.",
            buckets=BUCKETS,
            registry=self.registry,
        )

    def answered(self, outcome: str) -> None:
        """Count one answered call."""
        self.calls.labels(outcome if outcome in OUTCOMES else "other").inc()


class _Gauges(Collector):
    def __init__(self, state: Callable[[], Any]) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        if state is None:
            return
        driver = state.runner.driver
        for name, text, value in (
            ("b3os_node_slots", "Calls this node runs at once.", state.settings.slots),
            ("b3os_node_slots_in_use", "Calls running on this node now.", state.in_flight),
            ("b3os_node_pool_ready", "VMs prepared ahead, waiting for a call.", driver.pool_ready()),
            ("b3os_node_pool_size", "VMs the pool keeps prepared.", driver.pool_target()),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        boots = driver.boots_ms()
        if boots:
            median = statistics.median(boots) / 1000
            yield GaugeMetricFamily(
                "b3os_node_vm_boot_seconds", "Median boot of the last microVMs.", value=median
            )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())
