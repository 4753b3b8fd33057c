"""A STAND-IN for `POST /v1/actions/call`, served by a real uvicorn on 127.0.0.1.

It gives, on demand, answers the real api gives only under load or failure (a 503 with exactly
`Retry-After: 2`, a tool error, a call held open while a worker is killed or a run cancelled); the
happy path through the real api and a node is tests/engine/test_workflow_e2e.py. It records every
request (time, headers, body) and answers as each test scripts it, per action ref, or by default
with an echo of the input. Like the real api it keeps a 2xx answer per Idempotency-Key and gives
it again to a repeated key without running the call again (`executions` counts runs per key).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass
class Answer:
    """One scripted answer. `hold` makes the handler wait for the event before answering."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None


@dataclass
class Recorded:
    """One request as the stand-in received it."""

    at: float
    headers: dict[str, str]
    body: dict[str, Any]
    disconnected_at: float | None = None

    @property
    def key(self) -> str:
        return self.headers.get("idempotency-key", "")


class StandInApi:
    """The stand-in server: `url`, `script(ref, answers)`, `requests`, `executions`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.executions: dict[str, int] = {}
        self._scripts: dict[str, list[Answer]] = {}
        self._stored: dict[str, tuple[int, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = Starlette(routes=[Route("/v1/actions/call", self._call, methods=["POST"])])
        config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self) -> StandInApi:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in api did not start in 10 s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def script(self, ref: str, answers: list[Answer]) -> None:
        """Answer the next calls of `ref` with these, in order; then echo."""
        with self._lock:
            self._scripts.setdefault(ref, []).extend(answers)

    def for_key(self, key: str) -> list[Recorded]:
        return [r for r in self.requests if r.key == key]

    async def _call(self, request: Request) -> JSONResponse:
        body = await request.json()
        rec = Recorded(at=time.time(), headers={k.lower(): v for k, v in request.headers.items()}, body=body)
        with self._lock:
            self.requests.append(rec)
            stored = self._stored.get(rec.key)
            queue = self._scripts.get(body.get("ref", ""), [])
            answer = queue.pop(0) if (queue and stored is None) else None
        if stored is not None:
            return JSONResponse(stored[1], status_code=stored[0])
        answer = answer or Answer()
        if answer.hold is not None:
            await self._hold(request, rec, answer.hold)
        payload = (
            answer.body
            if answer.body is not None
            else {
                "output": body.get("input"),
                "call_id": f"call_{len(self.requests)}",
                "cost": {"total": 100},
            }
        )
        with self._lock:
            self.executions[rec.key] = self.executions.get(rec.key, 0) + 1
            if answer.status // 100 == 2:
                self._stored[rec.key] = (answer.status, payload)
        return JSONResponse(payload, status_code=answer.status, headers=answer.headers)

    @staticmethod
    async def _hold(request: Request, rec: Recorded, event: threading.Event) -> None:
        while not event.is_set():
            if rec.disconnected_at is None and await request.is_disconnected():
                rec.disconnected_at = time.time()
            await asyncio.sleep(0.05)


def echo_answer(output: dict[str, Any]) -> Answer:
    """A 200 answer with this output."""
    return Answer(body={"output": output, "call_id": "call_x", "cost": {"total": 100}})


def problem(status: int, code: str, reason: str | None, message: str, **extra: Any) -> Answer:
    """An error answer in the api's error body shape."""
    headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else {}
    err: dict[str, Any] = {"code": code, "message": message, **extra}
    if reason is not None:
        err["reason"] = reason
    return Answer(status=status, body={"error": err}, headers=headers)
