"""A foreach's child workflows: their calls count as their run's once Temporal says whose child they are.

A foreach of more than `FOREACH_CHUNK_ITEMS` items runs its items in child workflows (engine.foreach),
each a Temporal execution of its own. Their calls send, beside their own run id
(`X-B3OS-Run-Execution`), their workflow id (`X-B3OS-Run-Workflow`). `ForeachLinks.parent` asks Temporal
for that execution and answers its parent's workflow id and run id; `api.runs.grants.check` then holds
them to the run's (the parent must be the execution the api started, and the child's id its step's
chunk's). Nothing of it is taken from a workflow's input: a workflow started under a chunk's id by hand
has no parent, one started as another workflow's child has another parent, and both are refused.

What Temporal said is kept (`KEPT`, positive answers only): a chunk's first call asks Temporal, the
others do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from cachetools import TTLCache
from fastapi import Request
from temporalio.service import RPCError, RPCStatusCode

from api.errors import Forbidden, ServiceUnavailable
from api.runs.grants import EXECUTION_HEADER
from api.temporal import Temporal

WORKFLOW_HEADER = "X-B3OS-Run-Workflow"
ID_MOST_CHARS = 1_000  # Temporal's own limit on a workflow id

KEPT = 10_000
"""Child executions whose parent is kept (an hour each): a 10,000-item foreach has 10."""


@dataclass(frozen=True, slots=True)
class Linked:
    """A child execution and its parent, as Temporal gives them."""

    workflow_id: str
    run_id: str
    parent_workflow_id: str
    parent_run_id: str


class ForeachLinks:
    """Answers whose child the workflow execution that sends a call is (one Temporal client per app)."""

    def __init__(self, temporal: Temporal) -> None:
        self._temporal = temporal
        self._kept: TTLCache[tuple[str, str], Linked] = TTLCache(maxsize=KEPT, ttl=3600)

    async def parent(self, request: Request) -> Linked | None:
        """The parent of the execution a call names (None: the call names no workflow of its own).

        Raises:
            Forbidden: no such execution, or it is no workflow's child.
            ServiceUnavailable: Temporal did not answer.
        """
        workflow_id = request.headers.get(WORKFLOW_HEADER, "").strip()
        if not workflow_id:
            return None
        run_id = request.headers.get(EXECUTION_HEADER, "").strip()
        if len(workflow_id) > ID_MOST_CHARS or not run_id or len(run_id) > 64:
            raise _not_a_child()
        found = self._kept.get((workflow_id, run_id))
        if found is not None:
            return found
        client = await self._temporal.client()
        try:
            desc = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise _not_a_child() from None
            raise ServiceUnavailable(
                f"Temporal did not say whose child workflow {workflow_id[:200]} is: {exc.message}",
                retry_after_s=5,
            ) from None
        info = desc.raw_description.workflow_execution_info
        if not info.HasField("parent_execution"):
            raise _not_a_child()
        found = Linked(
            workflow_id=workflow_id,
            run_id=run_id,
            parent_workflow_id=info.parent_execution.workflow_id,
            parent_run_id=info.parent_execution.run_id,
        )
        self._kept[(workflow_id, run_id)] = found
        return found


def _not_a_child() -> Forbidden:
    return Forbidden(
        f"{WORKFLOW_HEADER} and {EXECUTION_HEADER} name no child workflow Temporal knows: a step's call "
        "comes from its run's workflow execution, or from a child workflow of it running a foreach's items.",
        reason="execution_not_of_run",
    )
