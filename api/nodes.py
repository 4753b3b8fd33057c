"""Nodes as the api knows them: registration by heartbeat, liveness, and the registry feed.

A node heartbeats every few seconds with its URL, free slots and installed versions; a node whose
last heartbeat is older than `max_age_s` is not offered calls. The feed hands out published pack
versions in `seq` order after a cursor (the last `seq` a node has seen).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api.models import Node, NodeHeartbeat, PackVersion, SigningKey, utcnow


def record_heartbeat(session: Session, *, beat: NodeHeartbeat) -> Node:
    """Register a node or refresh what it says about itself (commits)."""
    for _ in range(2):
        node = session.get(Node, beat.node_id)
        if node is None:
            node = Node.model_validate(beat.model_dump())
        else:
            for name, value in beat.model_dump().items():
                setattr(node, name, value)
        node.last_seen = utcnow()
        session.add(node)
        try:
            session.commit()
            return node
        except IntegrityError:  # a first heartbeat raced another one: update the row it made
            session.rollback()
    raise RuntimeError(f"heartbeat of node {beat.node_id} could not be stored")


def live_nodes(session: Session, *, max_age_s: float = 15.0) -> list[Node]:
    """Nodes heard from within `max_age_s`, the most free slots first."""
    since = utcnow() - dt.timedelta(seconds=max_age_s)
    stmt = (
        select(Node)
        .where(col(Node.last_seen) >= since)
        .order_by(col(Node.slots_free).desc(), col(Node.node_id))
    )
    return list(session.exec(stmt).all())


def registry_feed(session: Session, *, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Published versions with `seq > after` (oldest first, at most `limit`) and the next cursor."""
    stmt = select(PackVersion).where(col(PackVersion.seq) > after).order_by(col(PackVersion.seq)).limit(limit)
    versions = list(session.exec(stmt).all())
    kids = {v.kid for v in versions}
    keys = {
        k.kid: k.public_key for k in session.exec(select(SigningKey).where(col(SigningKey.kid).in_(kids)))
    }
    items = [
        {
            "seq": v.seq,
            "pack": v.pack,
            "version": v.version,
            "content_hash": v.content_hash,
            "manifest": v.manifest,
            "files": v.files,
            "public_key": keys.get(v.kid, ""),
        }
        for v in versions
    ]
    return items, (versions[-1].seq if versions else after)
