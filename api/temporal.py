"""The api's Temporal client: connected on first use, shared by runs and schedules.

Connecting is lazy so an api whose Temporal is down still serves everything else; a run start or a
schedule change while it is down is `503 unavailable` with Retry-After. The search attributes b3os sets
(engine.runs.SEARCH_ATTRIBUTES) are registered on the first connection.
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.service import RPCError

from api.config import Settings
from api.errors import ServiceUnavailable
from engine.worker import connect, ensure_search_attributes, tls_config


class Temporal:
    """One Temporal client per api app, connected on first use."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    @property
    def settings(self) -> Settings:
        """The settings the client connects with (the task queue and run timeout too)."""
        return self._settings

    async def client(self) -> Client:
        """The Temporal client, connected on first use (ServiceUnavailable when Temporal is down)."""
        async with self._lock:
            if self._client is None:
                self._client = await self._connect()
            return self._client

    async def _connect(self) -> Client:
        s = self._settings
        address = s.temporal_address
        try:
            tls = tls_config(
                enabled=s.temporal_tls,
                ca_file=s.temporal_tls_ca_file,
                cert_file=s.temporal_tls_cert_file,
                key_file=s.temporal_tls_key_file,
                server_name=s.temporal_tls_server_name,
            )
        except ValueError as exc:
            raise ServiceUnavailable(
                f"This api's Temporal TLS settings are wrong ({exc}); an operator must fix them.",
                retry_after_s=60,
            ) from None
        try:
            client = await connect(address, s.temporal_namespace, tls)
        except (RuntimeError, RPCError) as exc:
            raise ServiceUnavailable(
                f"Temporal at {address} is not reachable; try again shortly.", retry_after_s=5
            ) from exc
        await ensure_search_attributes(client)
        return client
