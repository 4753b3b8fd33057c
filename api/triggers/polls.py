"""Poll triggers: each subscription a Temporal Schedule of `trigger-poll` workflows, and the poll itself.

A poll subscription gets a Temporal Schedule `trigger-poll-<routine>-<id>` (engine.polls) when the
routine is stored, every `everyS` seconds, skipping a poll while the previous one runs; its end deletes
the schedule. Each poll's activity asks `poll` here (the worker token and the subscription's id):

1. the trigger's request is rendered (api.calls.http_template) with `input` (the subscription's `with:`),
   `connections.<key>.<param>` and `cursor` (the last poll's, kept in `trigger_subscriptions.cursor`);
2. it is sent through the egress proxy, as an http action's request: the pack's egress list, the
   organization's connections of the trigger (`connection:` or the trigger's `connections`) injected
   by the proxy; an upstream 429 or 503 is answered 429/503 with its Retry-After (the activity waits it);
3. `items` reads the answer's items, `dedupe` each item's id, `event` maps it; an item whose id the
   subscription has seen is skipped (the unique `dedupe` of trigger_deliveries), a new one is stored
   `pending` (api.triggers.deliveries starts its run once);
4. the first poll of a subscription only remembers its items (stored `ignored`, reason "seen by the
   first poll"): a new subscription starts from now and does not flood the routine with the past;
5. the next cursor (`cursor`, or unchanged) is stored after the items, so a poll that dies between the
   two is repeated and its items are found seen.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import Engine
from sqlmodel import Session, col, select
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import Priority, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from api.calls.http_action import FETCH_PATH, MAX_BODY_BYTES, MAX_REDIRECTS, retry_after_s
from api.calls.http_template import render_request, response_scope
from api.config import Settings
from api.connections import service as connections
from api.db import in_thread, read_session
from api.errors import ApiError, NotFound, RateLimited, ServiceUnavailable
from api.models import utcnow
from api.registry.catalog import resolve_trigger
from api.runs.lanes import Lanes
from api.temporal import Temporal
from api.triggers.deliveries import Deliveries, new_row
from api.triggers.tables import TriggerDelivery, TriggerSubscription
from engine import expressions
from engine.expressions import ExpressionError
from engine.polls import POLL_WORKFLOW_TYPE, PollInput, PollTriggerResult, poll_schedule_id
from engine.runs import SEARCH_ATTRIBUTE_ROUTINE
from packs.manifest import HttpRequest, Manifest
from packs.resolve import parse_ref
from packs.schemas import schema_errors
from packs.triggers import Trigger

POLL_PRIORITY = 5  # a poll only asks the api: last in line, as a schedule's tick
POLL_TIMEOUT_MS = 30_000
FIRST = "seen by the first poll: a new subscription starts from now"


class PollFailed(ApiError):
    """422 poll_failed: the upstream's answer cannot be read as the trigger says (the reason names why)."""

    code = "poll_failed"
    status = 422


class Polls:
    """Poll subscriptions' schedules and their polls, over one database engine and one Temporal client."""

    def __init__(
        self, engine: Engine, settings: Settings, temporal: Temporal, deliveries: Deliveries
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._temporal = temporal
        self._deliveries = deliveries
        self._lanes = Lanes(settings.temporal_task_queue, settings.temporal_busy_task_queue)
        self._http: httpx.AsyncClient | None = None

    # --- schedules ----------------------------------------------------------------------------

    async def schedule(self, sub: TriggerSubscription, every_s: int) -> None:
        """Create the subscription's Temporal Schedule (kept when it is there already)."""
        client = await self._temporal.client()
        action = ScheduleActionStartWorkflow(
            POLL_WORKFLOW_TYPE,
            PollInput(subscription_id=sub.id, routine=sub.routine_name, trigger=sub.pin),
            id=f"trigger-poll-{sub.id}",
            task_queue=await self._lanes.queue(client, POLL_PRIORITY),
            execution_timeout=timedelta(hours=1),
            priority=Priority(priority_key=POLL_PRIORITY),
            typed_search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_ROUTINE), sub.routine_name
                    )
                ]
            ),
        )
        schedule = Schedule(
            action=action,
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=every_s))]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            state=ScheduleState(note=f"polls {sub.pin} for routine {sub.routine_name} of {sub.org_id}"),
        )
        try:
            await client.create_schedule(
                poll_schedule_id(sub.id, sub.routine_name), schedule, trigger_immediately=True
            )
        except ScheduleAlreadyRunningError:
            pass
        except RPCError as exc:
            raise ServiceUnavailable(
                f"Temporal did not create the poll schedule: {exc.message}", retry_after_s=5
            ) from exc

    async def unschedule(self, sub: TriggerSubscription) -> None:
        """Delete an ended subscription's Temporal Schedule."""
        client = await self._temporal.client()
        try:
            await client.get_schedule_handle(poll_schedule_id(sub.id, sub.routine_name)).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise ServiceUnavailable(
                    f"Temporal did not delete the poll schedule: {exc.message}", retry_after_s=5
                ) from exc

    # --- one poll -----------------------------------------------------------------------------

    async def poll(self, subscription_id: str) -> PollTriggerResult:
        """Poll a subscription once (the poll workflow's activity asks it).

        Raises:
            NotFound: no such subscription, or it ended. RateLimited, ServiceUnavailable: the upstream's
                429 or 503 (its Retry-After), or the egress proxy away. PollFailed: the answer failed
                `items`, `dedupe`, `event` or `cursor`, or a status other than 2xx.
        """
        sub, manifest, trigger, rows = await in_thread(self._read, subscription_id)
        assert trigger.poll is not None
        keys = [sub.connection] if sub.connection else list(trigger.connections)
        missing = [k for k in keys if k not in rows]
        if missing:
            raise PollFailed(
                f"{sub.pin} needs the connection {missing[0]!r} of its pack, which the organization has not "
                "added: add it with `b3os connection add` or POST /v1/connections",
                reason="connection_missing",
            )
        scope: dict[str, Any] = {
            "input": sub.with_input,
            "connections": {k: dict(rows[k].params or {}) for k in keys},
            "cursor": sub.cursor,
        }
        request = HttpRequest.model_validate(trigger.poll.request.model_dump())
        rendered = render_request(request, scope, manifest.egress_hosts)
        credentials = [
            {"id": rows[k].id, "org_id": sub.org_id, "sealed": rows[k].sealed} for k in keys if k in rows
        ]
        answer = await self._fetch(rendered, manifest.egress_hosts, credentials)
        status = int(answer.get("status") or 0)
        headers: list[list[str]] = answer["headers"] if isinstance(answer.get("headers"), list) else []
        if status in (429, 503):
            wait = retry_after_s(next((v for k, v in headers if str(k).lower() == "retry-after"), None))
            message = f"{rendered.host} answered {status}: the poll waits {wait:.0f} s"
            if status == 429:
                raise RateLimited(message, reason="upstream", retry_after=wait)
            raise ServiceUnavailable(message, retry_after_s=wait)
        if not 200 <= status < 300:
            raise PollFailed(
                f"{rendered.host} answered HTTP {status} to the poll of {sub.pin}", reason="status"
            )
        response = response_scope(status, headers, base64.b64decode(answer.get("body") or ""))
        response.pop("is_json", None)
        found = _items(trigger, {**scope, "response": response})
        cursor = sub.cursor
        if trigger.poll.cursor is not None:
            try:
                cursor = expressions.evaluate(
                    trigger.poll.cursor, {**scope, "response": response, "items": [i for i, _, _ in found]}
                )
            except ExpressionError as exc:
                raise PollFailed(f"the trigger's cursor failed: {exc}", reason="cursor") from None
        first = sub.polled_at is None
        new = await in_thread(self._store, sub, found, cursor, first)
        if new:
            self._deliveries.wake()
        return PollTriggerResult(items=len(found), new=new, first=first)

    def _read(self, subscription_id: str) -> tuple[TriggerSubscription, Manifest, Trigger, dict[str, Any]]:
        with read_session(self._engine) as session:
            sub = session.get(TriggerSubscription, subscription_id[:64])
            if sub is None or sub.ended_at is not None or sub.kind != "poll":
                raise NotFound(f"There is no poll subscription {subscription_id[:100]} (or it ended).")
            resolved = resolve_trigger(session, ref=parse_ref(sub.pin))
            rows = connections.connections_for(session, org_id=sub.org_id, pack=resolved.ref.pack)
            return sub, resolved.manifest, resolved.trigger, rows

    async def _fetch(
        self, rendered: Any, egress: list[str], credentials: list[dict[str, Any]]
    ) -> dict[str, Any]:
        url, token = self._settings.egress_url, self._settings.egress_token
        if not url:
            raise ServiceUnavailable(
                "This api has no egress proxy configured (B3OS_EGRESS_URL): it polls nothing.",
                retry_after_s=60,
            )
        body = {
            "method": rendered.method,
            "url": rendered.url,
            "headers": [list(h) for h in rendered.headers],
            "body": base64.b64encode(rendered.body).decode() if rendered.body is not None else None,
            "egress": egress,
            "credentials": credentials,
            "timeout_ms": POLL_TIMEOUT_MS,
            "max_body_bytes": MAX_BODY_BYTES,
            "max_redirects": MAX_REDIRECTS,
        }
        self._http = self._http or httpx.AsyncClient(follow_redirects=False)
        try:
            response = await self._http.post(
                f"{url.rstrip('/')}{FETCH_PATH}",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx.Timeout(POLL_TIMEOUT_MS / 1000 + 5.0, connect=2.0),
            )
            answer = response.json()
        except (httpx.TransportError, ValueError):
            raise ServiceUnavailable(
                "The egress proxy cannot be reached: the poll waits.", retry_after_s=5
            ) from None
        if response.status_code != 200 or not isinstance(answer, dict):
            raise ServiceUnavailable("The egress proxy cannot be reached: the poll waits.", retry_after_s=5)
        if isinstance(answer.get("error"), dict):
            raise PollFailed(
                f"the egress proxy refused the poll: {answer['error'].get('message')}", reason="egress"
            )
        return answer

    def _store(
        self, sub: TriggerSubscription, found: list[tuple[Any, str, dict[str, Any]]], cursor: Any, first: bool
    ) -> int:
        """Store the items not seen before (pending, or ignored on the first poll), then the cursor."""
        ids = list(dict.fromkeys(item_id for _, item_id, _ in found))
        with read_session(self._engine) as session:
            seen = (
                set(
                    session.exec(
                        select(TriggerDelivery.dedupe).where(
                            TriggerDelivery.subscription_id == sub.id, col(TriggerDelivery.dedupe).in_(ids)
                        )
                    ).all()
                )
                if ids
                else set()
            )
        new = 0
        done: set[str] = set()
        for _, item_id, event in found:
            if item_id in seen or item_id in done:
                continue
            done.add(item_id)
            row = new_row(
                sub,
                status="ignored" if first else "pending",
                verified=True,
                event_id=item_id,
                event=event,
                reason=FIRST if first else None,
            )
            row.dedupe = item_id
            stored = self._deliveries.insert(row, kind="poll", quiet_duplicate=True)
            new += stored is not None and stored.status == "pending"
        with Session(self._engine) as session:
            kept = session.get(TriggerSubscription, sub.id)
            if kept is not None:
                kept.cursor, kept.polled_at = cursor, utcnow()
                session.add(kept)
                session.commit()
        return new


def _items(trigger: Trigger, scope: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
    """Each item of the answer with its id and event.

    Raises:
        PollFailed: `items` is not a list, or an item's `dedupe` or `event` failed or does not fit.
    """
    poll = trigger.poll
    assert poll is not None
    try:
        items = expressions.evaluate(poll.items, scope)
    except ExpressionError as exc:
        raise PollFailed(f"the trigger's items failed: {exc}", reason="items") from None
    if not isinstance(items, list):
        raise PollFailed(f"the trigger's items gave a {type(items).__name__}, not a list", reason="items")
    found = []
    for item in items:
        here = {**scope, "item": item}
        try:
            item_id = expressions.evaluate(poll.dedupe, here)
            event = expressions.evaluate(poll.event, here) if poll.has_event else item
        except ExpressionError as exc:
            raise PollFailed(f"the trigger's dedupe or event failed: {exc}", reason="items") from None
        if item_id is None or isinstance(item_id, dict | list) or not isinstance(event, dict):
            raise PollFailed("an item has no id, or its event is not an object", reason="items")
        problems = [e.message for e in schema_errors(trigger.event_schema, event)]
        if problems:
            raise PollFailed(
                f"an item's event does not match the trigger's eventSchema: {problems[0]}", reason="items"
            )
        found.append((item, str(item_id)[:200], event))
    return found
