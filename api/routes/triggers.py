"""Triggers: the organization's subscriptions and their deliveries (operators), a replay, and the webhook
address `POST /v1/hooks/{subscription}` (no API key: the delivery's signature authenticates it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from api.accounts.scopes import ROUTINES_READ, ROUTINES_RUN
from api.calls.auth import is_worker_token
from api.db import in_thread
from api.deps import Principal, bearer_token, require
from api.errors import Unauthorized, error_responses
from api.routes.routines import require_call_scope
from api.services import DeliveriesDep, PollsDep, SubscriptionsDep
from api.triggers.deliveries import Deliveries
from api.triggers.models import (
    DeliveryAccepted,
    DeliveryList,
    DeliveryPublic,
    ReplayCreate,
    SubscriptionList,
    SubscriptionPublic,
)
from api.triggers.tables import TriggerDelivery, TriggerSubscription
from engine.polls import PollTriggerResult

router = APIRouter(prefix="/v1/triggers", tags=["triggers"])
hooks = APIRouter(prefix="/v1/hooks", tags=["triggers"])
polling = APIRouter(prefix="/v1/triggers/polls", tags=["triggers"], include_in_schema=False)
Runner = Annotated[Principal, Depends(require(ROUTINES_RUN))]
Reader = Annotated[Principal, Depends(require(ROUTINES_READ))]
HOOK_PATH = "/v1/hooks/"


def subscription_public(
    row: TriggerSubscription, request: Request, deliveries: Deliveries, *, secret: bool
) -> SubscriptionPublic:
    """A subscription as the api shows it: a webhook's address, and its secret when `secret`."""
    webhook = row.kind == "webhook"
    base = str(request.base_url).rstrip("/")
    return SubscriptionPublic.model_validate(
        {
            "id": row.id,
            "routine": row.routine_name,
            "trigger": row.trigger,
            "pin": row.pin,
            "kind": row.kind,
            "with": row.with_input,
            "connection": row.connection,
            "inputs": row.inputs,
            "hook_url": f"{base}{HOOK_PATH}{row.id}" if webhook else None,
            "webhook_secret": deliveries.secret(row.id)
            if webhook and secret and row.ended_at is None
            else None,
            "created_at": row.created_at,
            "ended_at": row.ended_at,
        }
    )


def delivery_public(row: TriggerDelivery) -> DeliveryPublic:
    return DeliveryPublic.model_validate(row.model_dump())


@router.get("/subscriptions", response_model=SubscriptionList, responses=error_responses(403))
async def list_subscriptions(
    request: Request,
    principal: Reader,
    subscriptions: SubscriptionsDep,
    deliveries: DeliveriesDep,
    routine: Annotated[str | None, Query(max_length=63, description="only this routine's")] = None,
    ended: Annotated[bool, Query(description="ended subscriptions too")] = False,
) -> SubscriptionList:
    """The organization's trigger subscriptions (a webhook's secret shown to keys with routines:run)."""
    rows = await in_thread(
        subscriptions.list_subscriptions, org_id=principal.org_id, routine=routine, ended=ended
    )
    show = principal.has(ROUTINES_RUN)
    return SubscriptionList(
        subscriptions=[subscription_public(r, request, deliveries, secret=show) for r in rows]
    )


@router.get(
    "/subscriptions/{subscription_id}/deliveries",
    response_model=DeliveryList,
    responses=error_responses(403, 404),
)
async def list_deliveries(
    subscription_id: str,
    principal: Reader,
    subscriptions: SubscriptionsDep,
    deliveries: DeliveriesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeliveryList:
    """A subscription's deliveries, newest first: refused (with the reason), duplicate, pending, started."""
    sub = await in_thread(subscriptions.get, org_id=principal.org_id, subscription_id=subscription_id)
    rows = await in_thread(deliveries.list_deliveries, subscription_id=sub.id, limit=limit)
    return DeliveryList(deliveries=[delivery_public(r) for r in rows])


@router.post(
    "/subscriptions/{subscription_id}/replays",
    status_code=202,
    response_model=DeliveryPublic,
    responses=error_responses(400, 403, 404),
)
async def replay_delivery(
    subscription_id: str,
    body: ReplayCreate,
    principal: Runner,
    subscriptions: SubscriptionsDep,
    deliveries: DeliveriesDep,
) -> DeliveryPublic:
    """Run a delivery's event again, as a new run (a new pending delivery)."""
    require_call_scope(principal, "a replay")
    sub = await in_thread(subscriptions.get, org_id=principal.org_id, subscription_id=subscription_id)
    row = await in_thread(deliveries.replay, subscription=sub, delivery_id=body.delivery_id)
    deliveries.wake()
    return delivery_public(row)


@hooks.post(
    "/{subscription_id}",
    status_code=202,
    response_model=DeliveryAccepted,
    responses=error_responses(400, 401, 404),
)
async def receive_delivery(
    subscription_id: str, request: Request, deliveries: DeliveriesDep
) -> DeliveryAccepted:
    """A webhook delivery: verified by its signature, stored, answered; each event's run starts once."""
    body = await request.body()
    headers = {name.lower(): value for name, value in request.headers.items()}
    rows = await in_thread(deliveries.receive, subscription_id, headers, body)
    deliveries.wake()
    return DeliveryAccepted(deliveries=[delivery_public(r) for r in rows])


@polling.post("/{subscription_id}", response_model=PollTriggerResult)
async def poll_subscription(subscription_id: str, request: Request, polls: PollsDep) -> PollTriggerResult:
    """Poll a poll subscription once (a `trigger-poll` workflow's activity: the worker token)."""
    if not is_worker_token(request.app.state.settings.worker_token, bearer_token(request)):
        raise Unauthorized("Only a routine worker polls a trigger's subscription (the worker token).")
    return await polls.poll(subscription_id)
