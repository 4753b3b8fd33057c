"""`client.triggers`: the organization's trigger subscriptions (made by storing routines with `on:
[{trigger: ...}]`), their deliveries, and replays of a delivery's event."""

from __future__ import annotations

from typing import Any

from b3os import _endpoints as endpoints
from b3os.actions import AsyncSend, Send


class Triggers:
    """The trigger subscriptions of a `B3OS` client's organization."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def subscriptions(self, routine: str | None = None, *, ended: bool = False) -> list[dict[str, Any]]:
        """The subscriptions (of one routine when named; ended ones too with `ended`), oldest first: each
        `{"id", "routine", "trigger", "pin", "kind", "with", "inputs", "hook_url", "webhook_secret", ...}`."""
        return self._send(endpoints.list_subscriptions(routine, ended))

    def deliveries(self, subscription_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """A subscription's deliveries, newest first: `{"id", "status", "reason", "event_id", "run_id", ...}`.

        Raises:
            NotFound: the organization has no such subscription.
        """
        return self._send(endpoints.list_deliveries(subscription_id, limit))

    def replay(self, subscription_id: str, delivery_id: str) -> dict[str, Any]:
        """Run a delivery's event again, as a new run; the new (pending) delivery."""
        return self._send(endpoints.replay_delivery(subscription_id, delivery_id))


class AsyncTriggers:
    """The trigger subscriptions of an `AsyncB3OS` client's organization (`Triggers`' methods, awaited)."""

    def __init__(self, send: AsyncSend) -> None:
        self._send = send

    async def subscriptions(self, routine: str | None = None, *, ended: bool = False) -> list[dict[str, Any]]:
        """As `Triggers.subscriptions`."""
        return await self._send(endpoints.list_subscriptions(routine, ended))

    async def deliveries(self, subscription_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """As `Triggers.deliveries`."""
        return await self._send(endpoints.list_deliveries(subscription_id, limit))

    async def replay(self, subscription_id: str, delivery_id: str) -> dict[str, Any]:
        """As `Triggers.replay`."""
        return await self._send(endpoints.replay_delivery(subscription_id, delivery_id))
