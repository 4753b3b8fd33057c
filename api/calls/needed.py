"""The organization's connections an action requires, before admission (http and js actions)."""

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
