"""Webhook deliveries stored durably, then each event's run started once.

`receive` (POST /v1/hooks/{subscription}, no API key) reads the subscription (an ended or unknown one:
404), verifies the delivery with the subscription's secret (api.triggers.verify; a refusal is recorded,
then answered 401), reads its events, and writes one row per event in its own transaction: `pending`
with `dedupe` set to the event id, or, when the subscription already has that event id (the unique
index says so, whatever the races), `duplicate`. Only then is the delivery answered 202: what is
answered is on disk.

`start_pending` starts the run of each pending row: an ordinary run of the routine's current version
(api.runs.starts) for the key that stored the routine, with the subscription's inputs and the event as
`event`, under the Idempotency-Key `trigger-<subscription>-<sha256 of the event id>`, so two attempts
(two api replicas, a restart between the start and the row's update) give one run. A start past the
organization's run limits (429) or while Temporal is unreachable (503) stays pending and is tried
again: `run_forever` runs `start_pending` at once after each delivery and every `trigger_retry_s`, from
the api's start on, so a delivery stored before a restart is started after it. A start refused for
good (the routine is gone, the inputs no longer fit, the key was revoked) is marked `failed` with the
sentence.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Mapping

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlmodel import Session, col, select

from api import metrics
from api.accounts.organizations import new_id
from api.accounts.scopes import ACTIONS_CALL
from api.accounts.scopes import grants as scope_grants
from api.config import Settings
from api.db import in_thread, read_session
from api.errors import ApiError, InvalidRequest, NotFound, Unauthorized
from api.models import ApiKey
from api.registry.catalog import resolve_trigger
from api.runs.starts import RunStarts
from api.triggers.secrets import hooks_key, subscription_secret
from api.triggers.tables import TriggerDelivery, TriggerSubscription
from api.triggers.verify import check_signature, read_events
from packs.resolve import parse_ref
from packs.triggers import Trigger

log = logging.getLogger("b3os.api.triggers")

BATCH = 50
WAITING = (429, 503)


class Deliveries:
    """Receives deliveries and starts their runs, over one database engine and the run starts."""

    def __init__(self, engine: Engine, settings: Settings, starts: RunStarts) -> None:
        self._engine = engine
        self._settings = settings
        self._starts = starts
        self._key: bytes | None = None
        self._wake = asyncio.Event()
        self._stopping = False

    def secret(self, subscription_id: str) -> str:
        """The signing secret of a subscription (api.triggers.secrets)."""
        if self._key is None:
            self._key = hooks_key(self._settings)
        return subscription_secret(self._key, subscription_id)

    # --- receiving ------------------------------------------------------------------------------

    def receive(self, subscription_id: str, headers: Mapping[str, str], body: bytes) -> list[TriggerDelivery]:
        """Verify and store a delivery (in a worker thread): one row per event, each pending or duplicate.

        Raises:
            NotFound: no such subscription, or it ended. InvalidRequest: a poll subscription.
            Unauthorized: the signature does not hold (the refusal is recorded first).
        """
        with read_session(self._engine) as session:
            sub = session.get(TriggerSubscription, subscription_id[:64])
            trigger = _trigger(session, sub.pin) if sub is not None and sub.ended_at is None else None
        if sub is None or trigger is None:
            raise NotFound(f"There is no trigger subscription {subscription_id[:100]} (or it ended).")
        if trigger.webhook is None:
            raise InvalidRequest(f"Subscription {sub.id} polls {sub.trigger}: it takes no deliveries.")
        refused = check_signature(trigger.webhook, self.secret(sub.id), headers, body, time.time())
        if refused is not None:
            self._record(new_row(sub, status="refused", reason=refused))
            raise Unauthorized(f"The delivery is refused and recorded: {refused}.", reason="signature")
        events = read_events(trigger.webhook, trigger.event_schema, headers, body)
        if isinstance(events, str):
            return [self._record(new_row(sub, status="refused", reason=events, verified=True))]
        if not events:
            return [
                self._record(
                    new_row(sub, status="ignored", reason="the delivery holds no event", verified=True)
                )
            ]
        rows = []
        for read in events:
            if read.refused is not None:
                rows.append(
                    self._record(
                        new_row(
                            sub, status="refused", reason=read.refused, verified=True, event_id=read.event_id
                        )
                    )
                )
                continue
            row = new_row(sub, status="pending", verified=True, event_id=read.event_id, event=read.event)
            row.dedupe = read.event_id
            rows.append(self._record(row))
        return rows

    def _record(self, row: TriggerDelivery) -> TriggerDelivery:
        stored = self.insert(row)
        assert stored is not None  # a duplicate is written as one
        return stored

    def insert(
        self, row: TriggerDelivery, *, kind: str = "webhook", quiet_duplicate: bool = False
    ) -> TriggerDelivery | None:
        """Write one row in its own transaction; a second row of the same event becomes a duplicate (or,
        with `quiet_duplicate`, a poll's item seen before, is not written: None)."""
        with Session(self._engine, expire_on_commit=False) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                if quiet_duplicate:
                    return None
                row = TriggerDelivery(
                    **{
                        **row.model_dump(),
                        "dedupe": None,
                        "event": None,
                        "status": "duplicate",
                        "reason": f"event {row.event_id} was delivered before: it runs once",
                    }
                )
                session.add(row)
                session.commit()
        metrics.TRIGGER_DELIVERIES.labels(kind=kind, status=row.status).inc()
        return row

    def wake(self) -> None:
        """Start the pending rows now (a delivery was just stored)."""
        self._wake.set()

    # --- starting -------------------------------------------------------------------------------

    def stop(self) -> None:
        """End `run_forever` after its round under way (whose database work runs in a thread)."""
        self._stopping = True
        self._wake.set()

    async def run_forever(self) -> None:
        """Start pending rows at once when woken, and every `trigger_retry_s` (from the api's start), until
        `stop`."""
        while not self._stopping:
            try:
                await self.start_pending()
            except (OperationalError, InterfaceError) as exc:  # the database away: the next round tries
                log.warning("trigger deliveries: the database could not be reached: %s", type(exc).__name__)
            except Exception:  # a fault of ours: the next round tries again
                log.exception("starting pending trigger deliveries failed")
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._settings.trigger_retry_s)
            except TimeoutError:
                pass
            self._wake.clear()

    async def start_pending(self) -> int:
        """Start the runs of the pending rows (oldest first, BATCH at a time); how many started."""
        rows: list[TriggerDelivery] = await in_thread(self._pending)
        started = 0
        for row in rows:
            started += await self.start(row)
        return started

    def _pending(self) -> list[TriggerDelivery]:
        with read_session(self._engine) as session:
            query = select(TriggerDelivery).where(TriggerDelivery.status == "pending")
            return list(session.exec(query.order_by(col(TriggerDelivery.received_at)).limit(BATCH)).all())

    async def start(self, row: TriggerDelivery) -> bool:
        """Start one pending row's run; whether it started (else it stays pending, or failed for good)."""
        sub, key = await in_thread(self._owner, row.subscription_id)
        error: str | None = None
        run_id: str | None = None
        if sub is None:
            error = "its subscription is gone"
        elif key is None or key.revoked_at is not None or not scope_grants(key.scopes, ACTIONS_CALL):
            error = f"the key that stored routine {sub.routine_name!r} was revoked or lacks {ACTIONS_CALL}"
        else:
            event_key = row.dedupe or row.id  # a replay has no dedupe: its own id keys its run
            digest = hashlib.sha256(event_key.encode()).hexdigest()[:40]
            try:
                async with self._starts.limits.turn(sub.org_id):
                    run, _ = await self._starts.start(
                        org_id=sub.org_id,
                        key_id=sub.key_id,
                        version=self._starts.current(sub.org_id, sub.routine_name, sub.inputs),
                        idempotency_key=f"trigger-{sub.id}-{digest}",
                        request={"trigger": sub.id, "event": event_key},
                        event=row.event,
                    )
                run_id = run.id
            except ApiError as exc:
                if exc.status in WAITING:
                    metrics.TRIGGER_RUNS.labels(outcome="waiting").inc()
                    await in_thread(self._update, row.id, "pending", None, exc.message)
                    return False
                error = exc.message
        outcome = "started" if run_id is not None else "failed"
        metrics.TRIGGER_RUNS.labels(outcome=outcome).inc()
        await in_thread(self._update, row.id, outcome, run_id, error)
        return run_id is not None

    def _owner(self, subscription_id: str) -> tuple[TriggerSubscription | None, ApiKey | None]:
        with read_session(self._engine) as session:
            sub = session.get(TriggerSubscription, subscription_id)
            return sub, session.get(ApiKey, sub.key_id) if sub is not None else None

    def _update(self, delivery_id: str, status: str, run_id: str | None, error: str | None) -> None:
        with Session(self._engine) as session:
            row = session.get(TriggerDelivery, delivery_id)
            if row is None:
                return
            row.status, row.run_id, row.attempts = status, run_id, row.attempts + 1
            row.last_error = error[:1000] if error else None
            session.add(row)
            session.commit()

    # --- reading and replaying ------------------------------------------------------------------

    def list_deliveries(self, *, subscription_id: str, limit: int) -> list[TriggerDelivery]:
        """A subscription's deliveries, newest first."""
        with read_session(self._engine) as session:
            query = select(TriggerDelivery).where(TriggerDelivery.subscription_id == subscription_id)
            return list(
                session.exec(query.order_by(col(TriggerDelivery.received_at).desc()).limit(limit)).all()
            )

    def replay(self, *, subscription: TriggerSubscription, delivery_id: str) -> TriggerDelivery:
        """A new pending row with the event of an earlier delivery: its run starts again, as a new run.

        Raises:
            NotFound: the subscription has no such delivery. InvalidRequest: it holds no event to run.
        """
        with read_session(self._engine) as session:
            old = session.get(TriggerDelivery, delivery_id[:40])
        if old is None or old.subscription_id != subscription.id:
            raise NotFound(
                f"Subscription {subscription.id} has no delivery {delivery_id[:100]}.", field="delivery_id"
            )
        event = old.event if old.event is not None else self._event_of(subscription.id, old.event_id)
        if event is None or old.status == "refused":
            raise InvalidRequest(
                f"Delivery {old.id} is {old.status}: it holds no event that may run.", field="delivery_id"
            )
        row = new_row(
            subscription, status="pending", verified=old.verified, event_id=old.event_id, event=event
        )
        row.reason = f"a replay of delivery {old.id}"
        return self._record(row)

    def _event_of(self, subscription_id: str, event_id: str | None) -> dict | None:  # type: ignore[type-arg]
        """The event of the delivery that ran `event_id` (a duplicate keeps none of its own)."""
        with read_session(self._engine) as session:
            first = session.exec(
                select(TriggerDelivery).where(
                    TriggerDelivery.subscription_id == subscription_id, TriggerDelivery.dedupe == event_id
                )
            ).first()
            return first.event if first is not None else None


def _trigger(session: Session, pin: str) -> Trigger | None:
    try:
        return resolve_trigger(session, ref=parse_ref(pin)).trigger
    except Exception:  # the version was withdrawn: the subscription cannot be served
        return None


def new_row(
    sub: TriggerSubscription,
    *,
    status: str,
    reason: str | None = None,
    verified: bool = False,
    event_id: str | None = None,
    event: dict | None = None,  # type: ignore[type-arg]
) -> TriggerDelivery:
    return TriggerDelivery(
        id=new_id("dlv"),
        subscription_id=sub.id,
        org_id=sub.org_id,
        verified=verified,
        status=status,
        reason=reason[:1000] if reason else None,
        event_id=event_id,
        event=event,
    )
