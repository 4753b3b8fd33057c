"""`uses:` refs resolved against this api's own registry (in process, over the database).

`DbResolver` follows `engine.validate.ActionResolver`: `input_schema(ref)` resolves the ref with
`api.registry.resolve_ref` (the newest version of its major, or the exact version) and returns the
action's inputSchema, or raises `engine.resolvers.ResolveError` with a sentence naming what is
missing: the pack, the version (listing the versions there are) or the action (listing the actions).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from api.models import PackVersion
from api.registry import resolve_ref
from engine.resolvers import ResolveError, action_input_schema
from packs.errors import RefError
from packs.refs import ActionRef


class DbResolver:
    """Resolves refs against the registry tables of one database session."""

    def __init__(self, session: Session) -> None:
        """Read through this session (the caller owns it).

        Args:
            session: An open session on the api's database.
        """
        self._session = session

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names.

        Raises:
            ResolveError: the ref does not parse, or the registry has no such pack, version or action.
        """
        try:
            parsed = ActionRef.parse(ref)
        except RefError as exc:
            raise ResolveError(str(exc)) from None
        version = resolve_ref(self._session, ref=parsed)
        if version is None:
            listed = self._session.exec(
                select(PackVersion.version)
                .where(col(PackVersion.pack) == parsed.pack)
                .order_by(col(PackVersion.major), col(PackVersion.minor), col(PackVersion.patch))
            ).all()
            if not listed:
                raise ResolveError(f"pack {parsed.pack} is not in the registry")
            wanted = parsed.version if parsed.is_exact else f"{parsed.major}.x.y"
            raise ResolveError(f"{parsed.pack} has no version {wanted} (versions: {', '.join(listed)})")
        return action_input_schema(parsed, version.manifest, version.version)
