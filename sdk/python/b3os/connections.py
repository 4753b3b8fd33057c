"""`client.connections`: the organization's credentials for the connections packs declare.

The api seals a secret to the egress proxy and can never read it back: no answer carries it (`hint` is
its last 4 characters when it has at least 12).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from b3os import _endpoints as endpoints
from b3os.actions import AsyncSend, Send

Secret = str | Mapping[str, Any]
"""A text (api_key, bearer), `{"username", "password"}` (basic) or `{"access_token", ...}` (oauth2)."""


class Connections:
    """The connections of a `B3OS` client's organization."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def add(
        self, pack: str, connection: str, secret: Secret, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Add (or replace) the organization's credential for a pack's connection.

        Args:
            pack: The pack, `ns/name` (`io.b3os/github`); its newest version must declare the connection.
            connection: The connection's key in the manifest (`token`).
            secret: The secret, in the shape the connection's kind takes.
            params: The connection's non-secret params (its schema's defaults fill the rest).

        Returns:
            `{"id": "conn_...", "pack", "connection", "kind", "params", "hint", "created_at"}`.

        Raises:
            InvalidRequest: the secret or a param has not the shape the connection takes (`field`).
            NotFound: the pack or its connection is missing.
        """
        return self._send(endpoints.add_connection(pack, connection, secret, params))

    def list(self) -> list[dict[str, Any]]:
        """The organization's connections (never a secret), by pack then connection."""
        return self._send(endpoints.list_connections())

    def remove(self, id: str) -> None:
        """Remove a connection by its id (`conn_...`).

        Raises:
            NotFound: no connection of this organization has that id.
        """
        self._send(endpoints.remove_connection(id))


class AsyncConnections:
    """The connections of an `AsyncB3OS` client's organization (the methods of `Connections`, awaited)."""

    def __init__(self, send: AsyncSend) -> None:
        self._send = send

    async def add(
        self, pack: str, connection: str, secret: Secret, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """As `Connections.add`."""
        return await self._send(endpoints.add_connection(pack, connection, secret, params))

    async def list(self) -> list[dict[str, Any]]:
        """As `Connections.list`."""
        return await self._send(endpoints.list_connections())

    async def remove(self, id: str) -> None:
        """As `Connections.remove`."""
        await self._send(endpoints.remove_connection(id))
