"""`uses:` refs resolved against this api's own registry (in process, over the database).

`DbResolver` follows `engine.validate.ActionResolver`: `input_schema(ref)` resolves the ref with
`api.registry.resolve` (the one rule of `packs.resolve`) and returns the action's inputSchema, or
raises `packs.resolve.ResolveError` with a sentence naming what is missing: the pack, the version
(listing the versions there are) or the action (listing the actions). Each ref's exact pin is kept in
`pins`: a run calls exactly the versions it was validated against.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from api.registry.catalog import resolve, resolve_trigger
from packs.resolve import parse_ref
from packs.triggers import Trigger


class DbResolver:
    """Resolves refs against the registry tables of one database session."""

    def __init__(self, session: Session) -> None:
        """Read through this session (the caller owns it).

        Args:
            session: An open session on the api's database.
        """
        self._session = session
        self.pins: dict[str, str] = {}

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names.

        Raises:
            ResolveError: the ref does not parse, or the registry has no such pack, version or action.
        """
        resolved, _ = resolve(self._session, ref=parse_ref(ref))
        self.pins[ref] = resolved.pin
        return resolved.action.input_schema

    def trigger(self, ref: str) -> Trigger:
        """The trigger `ref` (`ns/pack/key@1`) names.

        Raises:
            ResolveError: the ref does not parse, or the registry has no such pack, version or trigger.
        """
        resolved = resolve_trigger(self._session, ref=parse_ref(ref))
        self.pins[ref] = resolved.pin
        return resolved.trigger
