"""A wait for a run's end (`GET /v1/runs/{id}?wait_s=`) that Temporal answers "Workflow is busy": it asks
again until the run ends or the wait is over, and never answers 503 for that (api.runs.waiting)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryResponse
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

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


async def test_a_wait_asks_the_real_server_once_not_in_a_loop_at_its_end(
    temporal_env: WorkflowEnvironment,
) -> None:
    """Temporal's frontend answers a long poll at once when less than a second of its deadline is left:
    the wait's last second was a loop of ~150 polls a second (20 waiting reads took most of the dev
    server's CPU). A wait of a run that does not end asks once per long poll."""
    real = temporal_env.client
    workflow_id = f"waits-{uuid.uuid4()}"  # no worker polls its queue: the run stays open
    await real.start_workflow("Nobody", id=workflow_id, task_queue=f"none-{uuid.uuid4()}")
    asked: list[Any] = []

    async def history(request: Any, **kwargs: Any) -> Any:
        asked.append(request)
        return await real.workflow_service.get_workflow_execution_history(request, **kwargs)

    client = SimpleNamespace(
        namespace=real.namespace, workflow_service=SimpleNamespace(get_workflow_execution_history=history)
    )
    try:
        await Waits().until_closed(client, workflow_id, wait_s=2.5)  # type: ignore[arg-type]
    finally:
        await real.get_workflow_handle(workflow_id).terminate("test over")
    assert len(asked) <= 2, f"{len(asked)} polls in one wait"
