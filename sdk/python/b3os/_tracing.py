"""W3C trace context on the SDK's requests: when the calling program traces with OpenTelemetry, each
request carries its current span's `traceparent`, so the api's spans join the caller's trace.

Nothing is imported until the first request; without `opentelemetry-api`, or outside a span, no header
is added.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

_inject: Callable[[MutableMapping[str, str]], Any] | None = None
_loaded = False


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's trace context to a request's headers (nothing outside a span)."""
    global _inject, _loaded
    if not _loaded:
        _loaded = True
        try:
            from opentelemetry import propagate
        except ImportError:
            return
        _inject = propagate.inject
    if _inject is not None:
        _inject(headers)
