"""Scripting the HTTPS stand-ins of the stack's upstream hosts (tests/egress/servers.py) for SDK tests."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from calls.stack import REPO
from realstack import RoutineStack

sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply, Upstream  # noqa: E402

SEARCH = "io.b3os/open-meteo/search-places@1"
PUBLIC = "com.example.tools/probe/public@1"
BERLIN = {"name": "Berlin", "latitude": 52.52437, "longitude": 13.41053, "timezone": "Europe/Berlin"}

__all__ = ["BERLIN", "PUBLIC", "SEARCH", "Recorded", "Reply", "geo_answers", "json_reply", "scripted"]


def json_reply(body: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, [("Content-Type", "application/json"), *(headers or [])], json.dumps(body).encode())


def geo_answers(stack: RoutineStack) -> Upstream:
    """The Open-Meteo stand-in, answering Berlin to every search."""
    geo = stack.upstreams["geocoding-api.open-meteo.com"]
    geo.on("/v1/search", json_reply({"results": [BERLIN]}))
    return geo


def scripted(stack: RoutineStack, path: str, replies: list[Reply]) -> list[float]:
    """Make api.example.com answer `path` with `replies` in turn (the last one again after them); the
    monotonic time each request arrived is appended to the returned list."""
    arrived: list[float] = []

    def answer(_: Recorded) -> Reply:
        arrived.append(time.monotonic())
        return replies[min(len(arrived), len(replies)) - 1]

    stack.upstreams["api.example.com"].on(path, answer)
    return arrived
