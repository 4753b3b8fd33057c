"""What a poll trigger's Temporal action takes and gives: the models of the `trigger-poll` workflow.

A poll subscription (api.triggers.polls) is a Temporal Schedule `trigger-poll-<routine>-<subscription
id>` that every `everyS` seconds starts a `trigger-poll` workflow (engine.poll_workflow) on the routine
workers' task queue: one workflow per poll, visible in the Temporal UI under the schedule. Its activity,
`poll_trigger`, asks the api to poll (`POST /v1/triggers/polls/{id}` with the worker token): the api
sends the trigger's request through the egress proxy, stores the new items durably and keeps the cursor;
an upstream 429 or 503 is retried after its Retry-After.

Standard library and pydantic only: the workflow sandbox imports this module.
"""

from __future__ import annotations

from pydantic import BaseModel

POLL_WORKFLOW_TYPE = "trigger-poll"
"""The registered name of the workflow a poll subscription's schedule starts."""


def poll_schedule_id(subscription_id: str, routine: str) -> str:
    """The Temporal Schedule of a poll subscription, the routine's name first (the Temporal UI lists it)."""
    return f"trigger-poll-{routine}-{subscription_id}"


class PollInput(BaseModel):
    """The poll workflow's input, fixed when the subscription's schedule is created."""

    subscription_id: str
    routine: str
    trigger: str


class PollTriggerInput(BaseModel):
    subscription_id: str


class PollTriggerResult(BaseModel):
    """One poll: the items the answer held, those new to the subscription, and whether it was the first
    (whose items are only remembered: a new subscription starts from now)."""

    items: int
    new: int
    first: bool = False
