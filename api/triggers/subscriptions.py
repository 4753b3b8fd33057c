"""Subscriptions of routines to packs' triggers: made, changed and ended as routines are stored; listed.

Storing a routine applies its `on: [{trigger: ...}]` (`apply_declared`): each trigger item keeps the
active subscription of the same trigger ref (the first one not yet kept, at the same position when
there is one), so a webhook's address and secret survive a routine stored again with other steps or
another `with:`; an item with none gets a new subscription (an unguessable id: `trg_` and 20 random
lowercase letters and digits); a subscription no item keeps is ended (`ended_at`): its address answers
404 from then on, and its deliveries stay listed. Each subscription records the key that stored the
routine: its runs are started for that key, as a schedule's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from api.accounts.organizations import new_id
from api.db import read_session
from api.errors import InvalidRequest, NotFound
from api.models import utcnow
from api.routines.resolver import DbResolver
from api.triggers.tables import TriggerSubscription
from engine.routine import EventTrigger, Routine
from packs.resolve import ResolveError


@dataclass
class Applied:
    """What storing a routine did to its subscriptions."""

    active: list[TriggerSubscription] = field(default_factory=list)
    created: list[TriggerSubscription] = field(default_factory=list)
    ended: list[TriggerSubscription] = field(default_factory=list)
    every_s: dict[str, int] = field(default_factory=dict)  # a poll subscription's interval, by its id


class Subscriptions:
    """The subscriptions of every organization, over one database engine (methods run in worker threads)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def apply_declared(self, *, org_id: str, key_id: str, routine: Routine) -> Applied:
        """Make the routine's subscriptions those its `on:` declares now (in one transaction).

        Raises:
            InvalidRequest: a trigger no longer resolves (its pack, version or trigger is gone).
        """
        applied = Applied()
        items = [(i, item) for i, item in enumerate(routine.on or []) if isinstance(item, EventTrigger)]
        with Session(self._engine, expire_on_commit=False) as session:
            resolver = DbResolver(session)
            old = list(
                session.exec(
                    select(TriggerSubscription)
                    .where(
                        TriggerSubscription.org_id == org_id,
                        TriggerSubscription.routine_name == routine.name,
                        col(TriggerSubscription.ended_at).is_(None),
                    )
                    .order_by(col(TriggerSubscription.position))
                ).all()
            )
            for position, item in items:
                try:
                    trigger = resolver.trigger(item.trigger)
                except ResolveError as exc:
                    raise InvalidRequest(
                        f"Routine {routine.name!r}, on[{position}]: trigger: cannot resolve "
                        f"{item.trigger}: {exc}",
                        field="yaml",
                    ) from None
                same = [s for s in old if s.trigger == item.trigger]
                row = next((s for s in same if s.position == position), same[0] if same else None)
                if row is None:
                    row = TriggerSubscription(
                        id=new_id("trg"),
                        org_id=org_id,
                        routine_name=routine.name,
                        key_id=key_id,
                        position=position,
                        trigger=item.trigger,
                        pin="",
                        kind=trigger.kind,
                        with_input={},
                        inputs={},
                    )
                    applied.created.append(row)
                else:
                    old.remove(row)
                row.key_id, row.position, row.pin, row.kind = (
                    key_id,
                    position,
                    resolver.pins[item.trigger],
                    trigger.kind,
                )
                row.with_input, row.connection, row.inputs = (
                    dict(item.with_),
                    item.connection,
                    dict(item.inputs),
                )
                session.add(row)
                applied.active.append(row)
                if trigger.poll is not None:
                    applied.every_s[row.id] = trigger.poll.every_s
            now = utcnow()
            for row in old:
                row.ended_at = now
                session.add(row)
                applied.ended.append(row)
            session.commit()
        return applied

    def list_subscriptions(
        self, *, org_id: str, routine: str | None = None, ended: bool = False
    ) -> list[TriggerSubscription]:
        """The organization's subscriptions (of one routine when named), oldest first; ended ones if asked."""
        with read_session(self._engine) as session:
            query = select(TriggerSubscription).where(TriggerSubscription.org_id == org_id)
            if routine is not None:
                query = query.where(TriggerSubscription.routine_name == routine)
            if not ended:
                query = query.where(col(TriggerSubscription.ended_at).is_(None))
            return list(
                session.exec(
                    query.order_by(col(TriggerSubscription.created_at), col(TriggerSubscription.position))
                ).all()
            )

    def get(self, *, org_id: str, subscription_id: str) -> TriggerSubscription:
        """One subscription of the organization (NotFound: none, or another organization's)."""
        with read_session(self._engine) as session:
            row = session.get(TriggerSubscription, subscription_id[:64])
        if row is None or row.org_id != org_id:
            raise NotFound(
                f"Your organization has no trigger subscription {subscription_id[:100]}.",
                field="subscription_id",
            )
        return row
