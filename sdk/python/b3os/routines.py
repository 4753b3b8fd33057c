"""`client.routines`: store a routine's YAML, read the organization's routines and their versions, start a
run, and manage a routine's schedules."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from b3os import _endpoints as endpoints
from b3os.actions import AsyncSend, Send


class Routines:
    """The routines of a `B3OS` client's organization."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def put(self, yaml_text: str) -> dict[str, Any]:
        """Store a routine under the name its YAML gives (a new version when it exists).

        Returns:
            The stored routine: `name`, `version`, `description`, `steps`, `inputs`, ...

        Raises:
            InvalidRequest: the YAML is not a valid routine (`error.body["problems"]`, with lines), or a
                `uses:` does not resolve.
        """
        return self._send(endpoints.put_routine(yaml_text))

    def get(self, name: str) -> dict[str, Any]:
        """One stored routine by name."""
        return self._send(endpoints.get_routine(name))

    def list(self) -> list[dict[str, Any]]:
        """The organization's stored routines."""
        return self._send(endpoints.list_routines())

    def run(
        self,
        name: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        max_cost_microusd: int | None = None,
    ) -> dict[str, Any]:
        """Start a run of a stored routine; the run as `runs.get` reads it (`run_id`, `status`, ...).

        The same Idempotency-Key gives the same run; without one, the SDK makes one for this start, so a
        start retried after a 429 or 503 never starts two runs. With `max_cost_microusd` the run starts only
        when its ceiling (`estimate`) is within it, and stops (failed, the sentence naming the step) before a
        call that could take it past it.

        Raises:
            NotFound: no routine of that name.
            InvalidRequest: an input does not fit the routine's inputs; or the run's ceiling is above
                `max_cost_microusd` or unbounded (`error.body["field"] == "max_cost_microusd"`, with
                `ceiling_microusd` and `unbounded`).
        """
        return self._send(
            endpoints.run_routine(
                name, inputs, idempotency_key=idempotency_key, max_cost_microusd=max_cost_microusd
            )
        )

    def estimate(
        self, name: str, inputs: Mapping[str, Any] | None = None, *, yaml_text: str | None = None
    ) -> dict[str, Any]:
        """The most a run of the routine with these inputs can cost, in micro-USD: `{"routine",
        "routine_hash", "ceiling_microusd" (None: unbounded), "unbounded", "steps": [{"id", "ref", "tier",
        "timeout_ms", "attempts", "items", "items_from", "call", "ceiling_microusd", "note"}]}`.

        `yaml_text`: a routine file to estimate instead of the stored version (not stored; its name must be
        `name`).

        Raises:
            NotFound: no routine of that name (and no `yaml_text`).
            InvalidRequest: the YAML has problems; an input does not fit.
        """
        return self._send(endpoints.estimate_routine(name, inputs, yaml_text=yaml_text))

    def versions(self, name: str) -> builtins.list[dict[str, Any]]:
        """Every stored version of a routine: `{"hash", "stored_at", "yaml_bytes", "current"}`."""
        return self._send(endpoints.list_routine_versions(name))

    def schedule(
        self,
        name: str,
        cron: str,
        *,
        timezone: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
    ) -> dict[str, Any]:
        """Schedule runs of a routine: `{"id", "cron", "timezone", "inputs", "overlap", "paused", ...}`.

        Raises:
            InvalidRequest: the cron, timezone, inputs or overlap (the error's `field` names it).
        """
        return self._send(
            endpoints.create_schedule(name, cron, timezone=timezone, inputs=inputs, overlap=overlap)
        )

    def schedules(self, name: str) -> builtins.list[dict[str, Any]]:
        """The schedules of a routine."""
        return self._send(endpoints.list_schedules(name))

    def delete_schedule(self, name: str, schedule_id: str) -> None:
        """Delete a schedule of a routine."""
        self._send(endpoints.delete_schedule(name, schedule_id))

    def pause_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """Pause a schedule."""
        return self._send(endpoints.schedule_action(name, schedule_id, "pause"))

    def unpause_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """Unpause a schedule."""
        return self._send(endpoints.schedule_action(name, schedule_id, "unpause"))

    def trigger_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """Fire a schedule now (a run starts at once)."""
        return self._send(endpoints.schedule_action(name, schedule_id, "trigger"))


class AsyncRoutines:
    """The routines of an `AsyncB3OS` client's organization (the methods of `Routines`, awaited)."""

    def __init__(self, send: AsyncSend) -> None:
        self._send = send

    async def put(self, yaml_text: str) -> dict[str, Any]:
        """As `Routines.put`."""
        return await self._send(endpoints.put_routine(yaml_text))

    async def get(self, name: str) -> dict[str, Any]:
        """As `Routines.get`."""
        return await self._send(endpoints.get_routine(name))

    async def list(self) -> list[dict[str, Any]]:
        """As `Routines.list`."""
        return await self._send(endpoints.list_routines())

    async def run(
        self,
        name: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        max_cost_microusd: int | None = None,
    ) -> dict[str, Any]:
        """As `Routines.run`."""
        return await self._send(
            endpoints.run_routine(
                name, inputs, idempotency_key=idempotency_key, max_cost_microusd=max_cost_microusd
            )
        )

    async def estimate(
        self, name: str, inputs: Mapping[str, Any] | None = None, *, yaml_text: str | None = None
    ) -> dict[str, Any]:
        """As `Routines.estimate`."""
        return await self._send(endpoints.estimate_routine(name, inputs, yaml_text=yaml_text))

    async def versions(self, name: str) -> builtins.list[dict[str, Any]]:
        """As `Routines.versions`."""
        return await self._send(endpoints.list_routine_versions(name))

    async def schedule(
        self,
        name: str,
        cron: str,
        *,
        timezone: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        overlap: str | None = None,
    ) -> dict[str, Any]:
        """As `Routines.schedule`."""
        return await self._send(
            endpoints.create_schedule(name, cron, timezone=timezone, inputs=inputs, overlap=overlap)
        )

    async def schedules(self, name: str) -> builtins.list[dict[str, Any]]:
        """As `Routines.schedules`."""
        return await self._send(endpoints.list_schedules(name))

    async def delete_schedule(self, name: str, schedule_id: str) -> None:
        """As `Routines.delete_schedule`."""
        await self._send(endpoints.delete_schedule(name, schedule_id))

    async def pause_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """As `Routines.pause_schedule`."""
        return await self._send(endpoints.schedule_action(name, schedule_id, "pause"))

    async def unpause_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """As `Routines.unpause_schedule`."""
        return await self._send(endpoints.schedule_action(name, schedule_id, "unpause"))

    async def trigger_schedule(self, name: str, schedule_id: str) -> dict[str, Any]:
        """As `Routines.trigger_schedule`."""
        return await self._send(endpoints.schedule_action(name, schedule_id, "trigger"))
