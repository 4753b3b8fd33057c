"""HTTP clients for the servers that tests and benches start on loopback.

httpx builds a TLS context for each client it makes, loading the whole CA bundle: ~50 ms of CPU a
client. The tests made a client per request (polling a run every 100 ms took a third of a core) while
the servers under test shared the same two cores. Every client here shares one context.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

TLS = ssl.create_default_context()


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` (same arguments) sharing the one TLS context."""
    return httpx.AsyncClient(verify=TLS, **kwargs)


def client(**kwargs: Any) -> httpx.Client:
    """An `httpx.Client` (same arguments) sharing the one TLS context."""
    return httpx.Client(verify=TLS, **kwargs)
