"""`client.actions`: the pack registry, resolving a ref, calling an action, publishing (and the publisher
list and signing keys it needs), earnings.

Every method returns the api's JSON answer as plain dicts and lists (the list methods return the list
itself); `docs/api.md` and `docs/calls.md` describe each shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from b3os import _endpoints as endpoints
from b3os._endpoints import FileValue
from b3os._wire import ApiRequest

Send = Callable[[ApiRequest], Any]
AsyncSend = Callable[[ApiRequest], Awaitable[Any]]


class Actions:
    """The registry and the call path of a `B3OS` client."""

    def __init__(self, send: Send) -> None:
        self._send = send

    def list_packs(self) -> list[dict[str, Any]]:
        """Every pack's newest version: `pack`, `version`, `title`, `actions` (each with its exact `ref`)."""
        return self._send(endpoints.list_packs())

    def get_pack(self, namespace: str, name: str) -> dict[str, Any]:
        """A pack's newest version: `pack`, `version`, `content_hash`, `kid`, `title`, `actions`, ...

        Args:
            namespace: The publisher namespace (`io.b3os`).
            name: The pack's name in it (`open-meteo`).

        Raises:
            NotFound: no such pack.
        """
        return self._send(endpoints.get_pack(namespace, name))

    def list_versions(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Every published version of a pack: `version`, `content_hash`, `kid`, `published_at`."""
        return self._send(endpoints.list_versions(namespace, name))

    def get_pack_manifest(self, namespace: str, name: str, version: str) -> dict[str, Any]:
        """The signed manifest (b3pack.json) of one version: `egress`, `connections`, `actions`, ..."""
        return self._send(endpoints.get_pack_manifest(namespace, name, version))

    def list_tools(self, namespace: str, name: str, version: str | None = None) -> list[dict[str, Any]]:
        """A version's actions as MCP tools (`{pack}__{action}`); the newest version by default."""
        return self._send(endpoints.list_tools(namespace, name, version))

    def resolve(self, ref: str) -> dict[str, Any]:
        """The exact pin and action a call of `ref` runs now: `pin`, `pack`, `version`, `kind`, `action`.

        Raises:
            NotFound: the pack, version or action is missing (`error.body["missing"]` says which).
        """
        return self._send(endpoints.resolve(ref))

    def call(
        self,
        ref: str,
        input: Mapping[str, Any] | None = None,
        *,
        files: Mapping[str, FileValue] | None = None,
        idempotency_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Call an action and return its answer: `call_id`, `ref` (the exact pin), `tier`, `output`, `cost`.

        A 429 or 503 answer is sent again after exactly its Retry-After, with the same Idempotency-Key
        (the given one, else one made for this call), so a retry never runs or bills the call twice.

        Args:
            ref: `ns/pack/action@1` (the newest 1.x.y) or `@1.0.0` (exact).
            input: The action's input.
            files: File fields to set: bytes (named after the field), a `pathlib.Path` (its bytes,
                named after the file) or a `(name, bytes)` pair.
            idempotency_key: The key: the same key and request give the stored answer, billed once.
            timeout_ms: The call's time limit (the action's and the api's limits still apply).

        Raises:
            InvalidRequest: the input does not fit the action (`field`), or a connection is missing.
            ActionFailed: the tool or the upstream failed (`reason`, `retryable`).
            RateLimited, Unavailable: still refused after the retries (`retry_after`).
        """
        request = endpoints.call(
            ref, input, files=files, idempotency_key=idempotency_key, timeout_ms=timeout_ms
        )
        return self._send(request)

    def cancel(self, *, call_id: str | None = None, idempotency_key: str | None = None) -> dict[str, Any]:
        """Cancel a running call of your organization by its id or its Idempotency-Key (exactly one).

        Returns `{"call_id", "state": "cancelled", "node"}`, or `{"state": "finished"}` when it had ended.
        """
        return self._send(endpoints.cancel_call(call_id=call_id, idempotency_key=idempotency_key))

    def has_blob(self, sha256: str) -> bool:
        """Whether your organization has uploaded the blob of this sha256 (lowercase hex)."""
        return bool(self._send(endpoints.has_blob(sha256)))

    def upload_blob(self, data: bytes) -> dict[str, Any]:
        """Upload a bundle file's bytes, named by their sha256: `{"digest": "sha256:<hex>", "bytes"}`."""
        return self._send(endpoints.upload_blob(data))

    def publish(self, manifest: Mapping[str, Any], files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Publish a signed manifest whose bundle files (`{"path", "sha256", "bytes"}`) were uploaded.

        Raises:
            Conflict: the version is already published (versions are immutable).
            InvalidRequest: a publish check failed (`reason`, `violations`).
        """
        return self._send(endpoints.publish(manifest, files))

    def earnings(self, namespace: str, month: str | None = None) -> dict[str, Any]:
        """What a namespace's tools earned in a month (`YYYY-MM`, default this month), in micro-USD."""
        return self._send(endpoints.earnings(namespace, month))

    def add_publisher(self, namespace: str, org_id: str | None = None) -> dict[str, Any]:
        """Give a namespace to an organization, by default the caller's: `{"namespace", "org_id",
        "created_at"}` (a key of the operator organization with `admin:publishers`).

        Raises:
            Forbidden: the key is not the operator organization's, or lacks the scope.
            NotFound: there is no such organization.
        """
        return self._send(endpoints.add_publisher(namespace, org_id))

    def add_signing_key(self, namespace: str, kid: str, public_key: str) -> dict[str, Any]:
        """Register the Ed25519 public key (base64 of its raw 32 bytes) that signs the namespace's packs
        under `kid` (`<namespace>#<name>`); the same key again is a no-op (`actions:tools:publish`).

        Raises:
            NotFound: the namespace is not your organization's.
            Conflict: the kid names another key, or the key has another kid.
        """
        return self._send(endpoints.add_signing_key(namespace, kid, public_key))


class AsyncActions:
    """The registry and the call path of an `AsyncB3OS` client (the methods of `Actions`, awaited)."""

    def __init__(self, send: AsyncSend) -> None:
        self._send = send

    async def list_packs(self) -> list[dict[str, Any]]:
        """As `Actions.list_packs`."""
        return await self._send(endpoints.list_packs())

    async def get_pack(self, namespace: str, name: str) -> dict[str, Any]:
        """As `Actions.get_pack`."""
        return await self._send(endpoints.get_pack(namespace, name))

    async def list_versions(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """As `Actions.list_versions`."""
        return await self._send(endpoints.list_versions(namespace, name))

    async def get_pack_manifest(self, namespace: str, name: str, version: str) -> dict[str, Any]:
        """As `Actions.get_pack_manifest`."""
        return await self._send(endpoints.get_pack_manifest(namespace, name, version))

    async def list_tools(self, namespace: str, name: str, version: str | None = None) -> list[dict[str, Any]]:
        """As `Actions.list_tools`."""
        return await self._send(endpoints.list_tools(namespace, name, version))

    async def resolve(self, ref: str) -> dict[str, Any]:
        """As `Actions.resolve`."""
        return await self._send(endpoints.resolve(ref))

    async def call(
        self,
        ref: str,
        input: Mapping[str, Any] | None = None,
        *,
        files: Mapping[str, FileValue] | None = None,
        idempotency_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """As `Actions.call` (files given as paths are read in a worker thread)."""
        request = await asyncio.to_thread(
            endpoints.call, ref, input, files=files, idempotency_key=idempotency_key, timeout_ms=timeout_ms
        )
        return await self._send(request)

    async def cancel(
        self, *, call_id: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """As `Actions.cancel`."""
        return await self._send(endpoints.cancel_call(call_id=call_id, idempotency_key=idempotency_key))

    async def has_blob(self, sha256: str) -> bool:
        """As `Actions.has_blob`."""
        return bool(await self._send(endpoints.has_blob(sha256)))

    async def upload_blob(self, data: bytes) -> dict[str, Any]:
        """As `Actions.upload_blob`."""
        return await self._send(endpoints.upload_blob(data))

    async def publish(
        self, manifest: Mapping[str, Any], files: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """As `Actions.publish`."""
        return await self._send(endpoints.publish(manifest, files))

    async def earnings(self, namespace: str, month: str | None = None) -> dict[str, Any]:
        """As `Actions.earnings`."""
        return await self._send(endpoints.earnings(namespace, month))

    async def add_publisher(self, namespace: str, org_id: str | None = None) -> dict[str, Any]:
        """As `Actions.add_publisher`."""
        return await self._send(endpoints.add_publisher(namespace, org_id))

    async def add_signing_key(self, namespace: str, kid: str, public_key: str) -> dict[str, Any]:
        """As `Actions.add_signing_key`."""
        return await self._send(endpoints.add_signing_key(namespace, kid, public_key))
