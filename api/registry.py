"""Reading the registry: packs, their versions by semver, refs resolved to versions, MCP tools.

Packs are a public catalog: any authenticated key reads every pack. Versions order by
(major, minor, patch); a major ref (`@1`) resolves to the newest 1.x.y, an exact ref to itself.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from api.errors import NotFound
from api.models import PackVersion
from packs.refs import ActionRef

_NEWEST_FIRST = (col(PackVersion.major).desc(), col(PackVersion.minor).desc(), col(PackVersion.patch).desc())


def versions_of(session: Session, *, pack: str) -> list[PackVersion]:
    """Every version of a pack, newest first (NotFound when the pack has none)."""
    stmt = select(PackVersion).where(PackVersion.pack == pack).order_by(*_NEWEST_FIRST)
    versions = list(session.exec(stmt).all())
    if not versions:
        raise NotFound(f"There is no pack {pack[:300]} in the registry.", field="pack")
    return versions


def newest(session: Session, *, pack: str, major: int | None = None) -> PackVersion | None:
    """The newest version of a pack (of one major version when given), or None."""
    stmt = select(PackVersion).where(PackVersion.pack == pack)
    if major is not None:
        stmt = stmt.where(PackVersion.major == major)
    return session.exec(stmt.order_by(*_NEWEST_FIRST).limit(1)).first()


def get_version(session: Session, *, pack: str, version: str) -> PackVersion:
    """One version of a pack, or NotFound naming it."""
    row = session.exec(
        select(PackVersion).where(PackVersion.pack == pack, PackVersion.version == version)
    ).first()
    if row is None:
        raise NotFound(f"There is no version {version[:100]} of the pack {pack[:300]}.", field="version")
    return row


def resolve_ref(session: Session, *, ref: ActionRef) -> PackVersion | None:
    """The version an action ref names (newest of its major, or exact), or None."""
    if ref.is_exact:
        stmt = select(PackVersion).where(PackVersion.pack == ref.pack, PackVersion.version == ref.version)
        return session.exec(stmt).first()
    return newest(session, pack=ref.pack, major=ref.major)


def actions_of(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's action objects."""
    actions = manifest.get("actions")
    return [a for a in actions if isinstance(a, dict)] if isinstance(actions, list) else []


def find_action(manifest: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The action of that key, or None."""
    return next((a for a in actions_of(manifest) if a.get("key") == key), None)


def action_summaries(version: PackVersion) -> list[dict[str, Any]]:
    """Each action's key, title, description and exact pin `ns/pack/action@1.0.0`."""
    return [
        {
            "key": a.get("key"),
            "title": a.get("title"),
            "description": a.get("description"),
            "ref": f"{version.pack}/{a.get('key')}@{version.version}",
        }
        for a in actions_of(version.manifest)
    ]


def mcp_tools(version: PackVersion) -> list[dict[str, Any]]:
    """MCP tool definitions of a version: `{pack}__{action}` with description and schemas."""
    name = version.pack.partition("/")[2]
    tools = []
    for action in actions_of(version.manifest):
        tool: dict[str, Any] = {
            "name": f"{name}__{action.get('key')}",
            "title": action.get("title"),
            "description": action.get("description"),
            "inputSchema": action.get("inputSchema") or {"type": "object"},
        }
        if action.get("outputSchema"):
            tool["outputSchema"] = action["outputSchema"]
        tools.append(tool)
    return tools
