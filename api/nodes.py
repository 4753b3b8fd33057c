"""Nodes as the api knows them: registration by heartbeat, liveness, and the registry feed.

A node heartbeats every few seconds with its URL, free slots and installed versions; a node whose
last heartbeat is older than `max_age_s`, whose credential is revoked (api.accounts.node_credentials), or
that answered a call without its proof (`mark_bad`, until its `bad_until`, whatever it heartbeats) is not
offered calls. A heartbeat's URL must be `http(s)://host[:port]` (no user, path, query or
fragment) with every address of the host on a network the operator allows (B3OS_NODE_NETWORKS);
a host name is resolved when the heartbeat arrives. The feed hands out published pack versions in
`seq` order after a cursor (the last `seq` a node has seen).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import bindparam, or_
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api.config import IPNetwork
from api.errors import InvalidRequest
from api.models import Node, NodeCredential, NodeHeartbeat, PackVersion, SigningKey, utcnow
from api.rawsql import Reads


def check_node_url(url: str, *, networks: Sequence[IPNetwork]) -> None:
    """Refuse a node URL that is not plain http(s) on an allowed network (InvalidRequest naming `url`)."""

    def refuse(why: str) -> InvalidRequest:
        return InvalidRequest(f"The node url {url[:200]!r} is refused: {why}.", field="url", value=url[:200])

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise refuse("it is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise refuse("a node is reached over http or https only")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise refuse("it carries a user or password")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise refuse("a node URL is scheme, host and port only")
    host = parts.hostname or ""
    if not host:
        raise refuse("it names no host")
    try:
        infos = socket.getaddrinfo(host, port or 80, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise refuse(f"the host {host} does not resolve") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not any(address in network for network in networks):
            shown = ", ".join(str(n) for n in networks) or "none"
            raise refuse(f"{host} is {address}, outside the node networks ({shown}; B3OS_NODE_NETWORKS)")


def record_heartbeat(session: Session, *, beat: NodeHeartbeat) -> Node:
    """Register a node or refresh what it says about itself (commits)."""
    for _ in range(2):
        node = session.get(Node, beat.node_id)
        said = beat.model_dump(exclude={"isolation"})
        if node is None:
            node = Node.model_validate(said)
        else:
            for name, value in said.items():
                setattr(node, name, value)
        node.last_seen = utcnow()
        session.add(node)
        try:
            session.commit()
            return node
        except IntegrityError:  # a first heartbeat raced another one: update the row it made
            session.rollback()
    raise RuntimeError(f"heartbeat of node {beat.node_id} could not be stored")


def mark_unreachable(session: Session, *, node_id: str, at: dt.datetime) -> None:
    """A node the api could not reach at `at` gets no calls until it next heartbeats (commits): without
    this, a dead node, having no running calls, would be the least loaded for `max_age_s`."""
    node = session.get(Node, node_id)
    if node is not None and node.last_seen < at:
        node.last_seen = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        session.add(node)
        session.commit()


def mark_bad(session: Session, *, node_id: str, until: dt.datetime) -> None:
    """A node that answered without its proof (the api cannot believe what it says, nor tell whether
    it ran the call) gets no calls until `until`, heartbeats or not (commits)."""
    node = session.get(Node, node_id)
    if node is not None:
        node.bad_until = until
        session.add(node)
        session.commit()


@dataclass(frozen=True)
class LiveNode:
    """A live node as a call needs it: its address, load and installed versions, and the key of its calls
    (what the api presents to it)."""

    node_id: str
    url: str
    slots_total: int
    slots_free: int
    installed: list[str]
    last_seen: dt.datetime
    call_key: str


_N = Node.__table__  # type: ignore[attr-defined]
_C = NodeCredential.__table__  # type: ignore[attr-defined]
_LIVE = (
    sa_select(
        _N.c.node_id,
        _N.c.url,
        _N.c.slots_total,
        _N.c.slots_free,
        _N.c.installed,
        _N.c.last_seen,
        _C.c.call_key,
    )
    .join(_C, _C.c.node_id == _N.c.node_id)
    .where(
        _N.c.last_seen >= bindparam("since"),
        _C.c.revoked_at.is_(None),
        or_(_N.c.bad_until.is_(None), _N.c.bad_until <= bindparam("now")),
    )
    .order_by(_N.c.slots_free.desc(), _N.c.node_id)
)  # built once: every call reads it (api.rawsql)


def live_nodes(reads: Reads, *, max_age_s: float = 15.0, now: dt.datetime | None = None) -> list[LiveNode]:
    """Nodes heard from within `max_age_s` whose credential stands and that are not marked bad, the most
    free slots first, each with its credential's call key, in one query."""
    now = now or utcnow()
    since = now - dt.timedelta(seconds=max_age_s)
    return [LiveNode(*row) for row in reads.run(_LIVE, {"since": since, "now": now}).rows]


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
