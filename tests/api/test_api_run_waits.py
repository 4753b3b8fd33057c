"""A wait for a run's end (`GET /v1/runs/{id}?wait_s=`) that Temporal answers "Workflow is busy": it asks
again until the run ends or the wait is over, and never answers 503 for that (api.runs.waiting)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryResponse
from temporalio.service import RPCError, RPCStatusCode

from api.errors import ServiceUnavailable
from api.runs import waiting
from api.runs.waiting import Waits


def _client(answers: list[Any]) -> tuple[Any, list[Any]]:
    asked: list[Any] = []

    async def history(request: Any, **_: Any) -> Any:
        asked.append(request)
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    service = SimpleNamespace(get_workflow_execution_history=history)
    return SimpleNamespace(namespace="default", workflow_service=service), asked


BUSY = RPCError("Workflow is busy.", RPCStatusCode.RESOURCE_EXHAUSTED, b"")
CLOSED = GetWorkflowExecutionHistoryResponse(history=History(events=[HistoryEvent(event_id=9)]))


async def test_a_busy_workflow_is_asked_again_until_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "BUSY_PAUSE_S", 0)
    client, asked = _client([BUSY, BUSY, CLOSED])
    await Waits().until_closed(client, "routine-x", wait_s=30)
    assert len(asked) == 3


async def test_any_other_refusal_is_a_503_with_retry_after() -> None:
    client, _ = _client([RPCError("no", RPCStatusCode.UNAVAILABLE, b"")])
    with pytest.raises(ServiceUnavailable) as refused:
        await Waits().until_closed(client, "routine-x", wait_s=30)
    assert refused.value.headers["Retry-After"] == "5"


async def test_a_wait_that_stays_busy_ends_with_its_wait_not_an_error() -> None:
    client, asked = _client([BUSY] * 1000)
    await asyncio.wait_for(Waits().until_closed(client, "routine-x", wait_s=0.2), timeout=30)
    assert 1 <= len(asked) < 1000
