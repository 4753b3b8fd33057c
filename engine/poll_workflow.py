"""`TriggerPollWorkflow`, registered as "trigger-poll": one poll of a poll trigger's subscription.

Deterministic code only (the Temporal sandbox re-imports this module). It asks the api to poll
(activity `poll_trigger`): 429 and 503, the api's own or the upstream's, are retried after their
Retry-After; any other refusal fails this poll with the api's sentence (the Temporal UI shows it under
the schedule's recent actions), and the schedule polls again at its next time.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from engine.polls import POLL_WORKFLOW_TYPE, PollInput, PollTriggerInput, PollTriggerResult

POLL_TIMEOUT = timedelta(seconds=60)


@workflow.defn(name=POLL_WORKFLOW_TYPE)
class TriggerPollWorkflow:
    """One poll of a subscription, through the api and the egress proxy."""

    @workflow.run
    async def run(self, input: PollInput) -> PollTriggerResult:
        return await workflow.execute_activity(
            "poll_trigger",
            PollTriggerInput(subscription_id=input.subscription_id),
            result_type=PollTriggerResult,
            start_to_close_timeout=POLL_TIMEOUT,
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=10),
            summary=f"poll {input.trigger}",
        )
