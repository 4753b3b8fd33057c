"""Where a call goes: the ref resolved to a published version some live node has installed, and the
least loaded of those nodes.

`@1` is the newest release 1.x.y installed on some live node; `@1.0.0` that exact version. A pack,
version or action the registry does not have is `404 not_found` naming the ref. A version the
registry has but no live node has installed (not synced yet, or its verification failed there) is
`503 pack_unavailable`, with `Retry-After` set to when the nodes next report: a node installs at its
next registry sync and says so in the heartbeat after it, so two heartbeat periods after the
oldest live node was last heard from (two periods when no node is live).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from api.calls.errors import CallInvalid, PackUnavailable, RefNotFound
from api.models import Node, PackVersion
from packs.errors import RefError
from packs.refs import ActionRef


@dataclass(frozen=True)
class Target:
    """A resolved call target: the version, its manifest and action, and the live nodes that have it."""

    ref: ActionRef
    version: str
    manifest: dict[str, Any]
    action: dict[str, Any]
    nodes: list[Node]

    @property
    def pack(self) -> str:
        """The pack id, `ns/name`."""
        return self.ref.pack

    @property
    def resolved(self) -> str:
        """The exact ref of the version called: `ns/pack/action@1.0.0`."""
        return f"{self.ref.pack}/{self.ref.action}@{self.version}"


def parse_ref(text: Any) -> ActionRef:
    """Parse the request's `ref`, refusing a bad one with `400 invalid_request` naming it."""
    try:
        return ActionRef.parse(text)
    except RefError as exc:
        raise CallInvalid(str(exc), details={"field": "ref"}) from None


def _sort_key(v: PackVersion) -> tuple[int, int, int]:
    return (v.major, v.minor, v.patch)


def _find_action(manifest: dict[str, Any], key: str) -> dict[str, Any] | None:
    for action in manifest.get("actions") or []:
        if isinstance(action, dict) and action.get("key") == key:
            return action
    return None


def resolve(
    session: Session, *, ref: ActionRef, live: list[Node], now: dt.datetime, heartbeat_s: float
) -> Target:
    """Resolve a ref against the registry and the live nodes.

    Raises:
        RefNotFound: the registry has no such pack, version or action.
        PackUnavailable: no live node has the version installed.
    """
    versions = list(session.exec(select(PackVersion).where(col(PackVersion.pack) == ref.pack)).all())
    if not versions:
        raise RefNotFound(f"{ref}: there is no pack {ref.pack} in the registry", details={"ref": str(ref)})
    if ref.is_exact:
        matching = [v for v in versions if v.version == ref.version]
        wanted = f"version {ref.version}"
    else:
        matching = [v for v in versions if v.major == ref.major and not v.prerelease]
        wanted = f"release {ref.major}.x.y"
    if not matching:
        raise RefNotFound(f"{ref}: pack {ref.pack} has no {wanted}", details={"ref": str(ref)})
    matching.sort(key=_sort_key, reverse=True)
    with_action = [v for v in matching if _find_action(v.manifest, ref.action) is not None]
    if not with_action:
        raise RefNotFound(
            f"{ref}: pack {ref.pack} {matching[0].version} has no action {ref.action!r}",
            details={"ref": str(ref)},
        )
    for version in with_action:
        tag = f"{ref.pack}@{version.version}"
        nodes = [n for n in live if tag in (n.installed or [])]
        if nodes:
            action = _find_action(version.manifest, ref.action)
            assert action is not None
            return Target(
                ref=ref, version=version.version, manifest=version.manifest, action=action, nodes=nodes
            )
    raise PackUnavailable(
        f"{ref}: no node has {ref.pack} {with_action[0].version} installed yet "
        "(or it failed verification there)",
        retry_after=next_report_s(live, now=now, heartbeat_s=heartbeat_s),
        details={"ref": str(ref)},
    )


def next_report_s(live: list[Node], *, now: dt.datetime, heartbeat_s: float) -> float:
    """Seconds until the live nodes have synced and reported once more (two heartbeat periods)."""
    if not live:
        return 2 * heartbeat_s
    oldest = min(n.last_seen for n in live)
    return max(1.0, (oldest - now).total_seconds() + 2 * heartbeat_s)


def live_nodes(session: Session, *, now: dt.datetime, max_age_s: float) -> list[Node]:
    """Nodes heard from within `max_age_s`."""
    since = now - dt.timedelta(seconds=max_age_s)
    return list(session.exec(select(Node).where(col(Node.last_seen) >= since)).all())
