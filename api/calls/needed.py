"""The organization's connections an action requires, before admission, and the tokens the egress proxy
refreshed while a call used them (http and js actions)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from api.calls.errors import CallInvalid
from api.calls.sessions import CallSessions
from api.connections import service as connections
from packs.resolve import Resolved


async def needed_connections(db: CallSessions, resolved: Resolved, *, org_id: str) -> dict[str, Any]:
    """The organization's connection row of each key the action requires.

    Raises:
        CallInvalid: reason `connection_missing`, naming the first connection not added (nothing billed).
    """
    needed = list(resolved.action.connections)

    def found(session: Session) -> dict[str, Any]:
        return connections.connections_for(session, org_id=org_id, pack=resolved.pack) if needed else {}

    rows = await db.run(found)
    for key in needed:
        if key not in rows:
            definition = resolved.manifest.connection(key)
            kind = definition.kind if definition else "credential"
            raise CallInvalid(
                f"{resolved.pin} needs the connection {key!r} ({kind}) of {resolved.pack}, which this "
                f"organization has not added: add it with `b3os connection add {resolved.pack} {key} "
                "--secret-stdin` or POST /v1/connections",
                reason="connection_missing",
                details={"connection": key, "pack": resolved.pack},
            )
    return {key: rows[key] for key in needed}


async def store_refreshed(
    db: CallSessions, *, org_id: str, sent: list[dict[str, Any]], refreshed: Any
) -> None:
    """Keep the tokens the proxy refreshed (sealed; compare-and-set on the token the call sent)."""
    olds = {c["id"]: c["sealed"] for c in sent}
    fresh = [
        (item["id"], item["sealed"])
        for item in (refreshed if isinstance(refreshed, list) else [])
        if isinstance(item, dict) and item.get("id") in olds and isinstance(item.get("sealed"), str)
    ]
    if not fresh:
        return

    def store(session: Session) -> None:
        for connection_id, sealed in fresh:
            connections.replace_sealed(
                session,
                org_id=org_id,
                connection_id=connection_id,
                old_sealed=olds[connection_id],
                new_sealed=sealed,
            )

    await db.run(store)
