"""HTTP clients for the servers that tests and benches start on loopback (and JSON answers for stand-ins).

httpx builds a TLS context for each client it makes, loading the whole CA bundle: ~50 ms of CPU a
client. The tests made a client per request (polling a run every 100 ms took a third of a core) while
the servers under test shared the same two cores. Every client here shares one context.
"""

from __future__ import annotations

import json
import ssl
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

TLS = ssl.create_default_context()


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` (same arguments) sharing the one TLS context."""
    return httpx.AsyncClient(verify=TLS, **kwargs)


def client(**kwargs: Any) -> httpx.Client:
    """An `httpx.Client` (same arguments) sharing the one TLS context."""
    return httpx.Client(verify=TLS, **kwargs)


def request(method: str, url: str, *, timeout: float | httpx.Timeout = 5.0, **kwargs: Any) -> httpx.Response:
    """`httpx.request` (same arguments, same 5 s default timeout) on a client sharing the one TLS context."""
    with client(timeout=timeout) as http:
        return http.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)


def put(url: str, **kwargs: Any) -> httpx.Response:
    return request("PUT", url, **kwargs)


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
    """Answer an `http.server` request with `body` as JSON (a stand-in for a server of the platform)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
