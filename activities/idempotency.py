"""The idempotency key of one step call, derived from where the call sits in its run.

The key depends only on the workflow id, the step id and the foreach index: every attempt of an
activity, a retry after a worker crash and a replay send the same key, so the api answers a repeated
call with the stored answer and never runs or bills it twice. Never random, never from the clock.
"""

from __future__ import annotations

import hashlib

KEY_VERSION = "b3os-step-v1"


def step_idempotency_key(workflow_id: str, step_id: str, index: int | None) -> str:
    """The `Idempotency-Key` of a step's call.

    Args:
        workflow_id: The run's workflow id (`routine-<name>-<run id>`).
        step_id: The step's id.
        index: The foreach index, or None for a step without foreach.

    Returns:
        `step_` followed by the hex sha256 of `b3os-step-v1\\n<workflow id>\\n<step id>\\n<index>`
        (the index is empty for a step without foreach).
    """
    material = f"{KEY_VERSION}\n{workflow_id}\n{step_id}\n{'' if index is None else index}"
    return "step_" + hashlib.sha256(material.encode()).hexdigest()
