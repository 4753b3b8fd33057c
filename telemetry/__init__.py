"""Metrics and traces shared by the b3os processes (api, node, egress proxy, routine worker).

- `config`: `TelemetrySettings` (`B3OS_OTEL_EXPORTER`, `B3OS_OTEL_FILE`, `B3OS_METRICS_TOKEN`).
- `tracing`: the tracer provider chosen by configuration (off by default), W3C `traceparent`
  injection and extraction, the server-span ASGI middleware.
- `logs`: `trace_id=` in every log line.
- `scrape`: `GET /metrics` (Prometheus text) for an ASGI app, readable from loopback or with the token.
- `interpreter`: the api's and the worker's switch interval (how long a busy thread keeps the
  interpreter's lock from their event loops).

Each process keeps its own metrics in its own `prometheus_client.CollectorRegistry` (api.metrics,
node.metrics, egress.metrics): no organization id is ever a label.
"""
