"""Traces: the tracer provider chosen by configuration, W3C trace context in and out, server spans.

`setup(service)` turns tracing on in this process when `B3OS_OTEL_EXPORTER` is not `none` (the
default): spans go to the console (stderr), to OTLP over HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, the
standard `OTEL_EXPORTER_OTLP_*` variables), or to a file of JSON lines (`B3OS_OTEL_FILE`; tests read
it to follow one trace across processes). Off, nothing here imports the OpenTelemetry SDK, no
middleware is installed, `inject` returns at once and no span is made: the call path pays one
boolean test per hop.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from telemetry.config import TelemetrySettings

_enabled = False
_lock = threading.Lock()
UNTRACED_PATHS = frozenset({"/metrics", "/healthz"})
TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def enabled() -> bool:
    """Whether this process exports spans."""
    return _enabled


def setup(service: str, settings: TelemetrySettings | None = None) -> bool:
    """Turn tracing on for this process as configured (once; later calls only say whether it is on).

    Args:
        service: the process's name, exported as `service.name` `b3os-<service>`.
        settings: the telemetry settings (default: from the environment).

    Returns:
        Whether spans are exported.
    """
    global _enabled
    settings = settings or TelemetrySettings()
    if settings.otel_exporter == "none":
        return _enabled
    with _lock:
        if _enabled:
            return True
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        name = os.environ.get("OTEL_SERVICE_NAME") or f"b3os-{service}"
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        if settings.otel_exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif settings.otel_exporter == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        else:
            if settings.otel_file is None:
                raise ValueError("B3OS_OTEL_EXPORTER=file needs B3OS_OTEL_FILE (the file spans go to)")
            provider.add_span_processor(SimpleSpanProcessor(_file_exporter(settings.otel_file)))
        trace.set_tracer_provider(provider)
        _enabled = True
    return True


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to outgoing headers, when tracing is on."""
    if _enabled:
        from opentelemetry import propagate

        propagate.inject(headers)


def injected(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the trace context added (see `inject`); the same dict."""
    inject(headers)
    return headers


def current_trace_id() -> str:
    """The current trace's id (32 hex digits), or `-` outside a trace or with tracing off."""
    if not _enabled:
        return "-"
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else "-"


def temporal_interceptors() -> list[Any]:
    """temporalio's TracingInterceptor when tracing is on (for the api's client and the worker)."""
    if not _enabled:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


class ServerSpans:
    """ASGI middleware: one SERVER span per HTTP request, a child of the caller's `traceparent`.

    Installed only while tracing is on (`install_server_spans`).
    """

    def __init__(self, app: ASGIApp) -> None:
        from opentelemetry import propagate, trace

        self.app = app
        self._tracer = trace.get_tracer("b3os")
        self._extract = propagate.extract
        self._server = trace.SpanKind.SERVER

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in TRACE_HEADERS
        }
        method = scope["method"]
        context = self._extract(carrier)
        with self._tracer.start_as_current_span(
            f"{method} {scope['path']}", context=context, kind=self._server
        ) as span:
            status = 0

            async def sent(message: Any) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            await self.app(scope, receive, sent)
            route = getattr(scope.get("route"), "path", None)
            if isinstance(route, str):
                span.update_name(f"{method} {route}")
            span.set_attribute("http.request.method", method)
            span.set_attribute("http.response.status_code", status)


def fastapi_options() -> dict[str, Any]:
    """`FastAPI(**fastapi_options())`: FastAPI's own request spans (it reads `traceparent` and names
    each span by its route), without its operation spans, metrics or exception logs (Prometheus has
    the metrics; an exception's text stays out of exported data). FastAPI's telemetry is inactive while
    no tracer provider is set, that is with tracing off."""
    if not _native_fastapi():
        return {}
    return {"telemetry": {"operation_spans": False, "metrics": False, "logs": False}}


def _native_fastapi() -> bool:
    import importlib.util

    return importlib.util.find_spec("fastapi.telemetry") is not None


def install_server_spans(app: Any) -> None:
    """Add `ServerSpans` (outermost) when tracing is on, unless FastAPI makes the spans itself."""
    from fastapi import FastAPI

    if _enabled and not (isinstance(app, FastAPI) and _native_fastapi()):
        app.add_middleware(ServerSpans)


def _file_exporter(path: Path) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class FileSpanExporter(SpanExporter):
        """One JSON object a line per span, appended (several processes may share the file)."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            lines = "".join(json.dumps(_span_dict(s), separators=(",", ":")) + "\n" for s in spans)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
            return SpanExportResult.SUCCESS

    return FileSpanExporter()


def _span_dict(span: Any) -> dict[str, Any]:
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "name": span.name,
        "kind": span.kind.name,
        "service": span.resource.attributes.get("service.name"),
        "start": span.start_time,
        "end": span.end_time,
    }
