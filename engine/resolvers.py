"""Action resolvers for validation: find an action's inputSchema from a `uses:` ref (`ActionResolver`), and
a trigger from an `on:` trigger ref (`trigger(ref)`, engine.routine_events).

Both resolve by the one rule of `packs.resolve` (exact version, or the newest release of the major):

- `LocalPackResolver`: pack directories on disk (each with a `b3pack.json`), for offline checks.
- `RegistryResolver`: the api's own resolution over HTTP, `GET {api}/v1/actions/resolve?ref=...`,
  which answers the exact pin and the action the api would call.

Both raise `ResolveError` (`packs.resolve.ResolveError`) with a sentence when a ref cannot be
resolved, and remember the exact pin of each ref they resolved in `pins`. Neither is used inside a
workflow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import httpx

from packs.errors import ManifestError
from packs.manifest import Manifest, parse_manifest
from packs.resolve import ResolveError, parse_ref, resolve, resolve_trigger
from packs.triggers import Trigger

__all__ = ["LocalPackResolver", "RegistryResolver", "ResolveError"]


class ActionResolver(Protocol):
    """Finds an action's inputSchema from its ref (the registry, or a local pack directory)."""

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The action's inputSchema, or None when it is not known.

        Raises:
            Exception: the ref cannot be resolved; the message says why.
        """
        ...


class LocalPackResolver:
    """Resolves refs against pack directories (each holding a `b3pack.json`)."""

    def __init__(self, directories: Iterable[str | Path]) -> None:
        """Read and model each directory's manifest.

        Raises:
            ResolveError: a directory has no readable, well-formed b3pack.json.
        """
        self._manifests: dict[str, dict[str, Manifest]] = {}
        self.pins: dict[str, str] = {}
        for directory in directories:
            path = Path(directory) / "b3pack.json"
            try:
                manifest = parse_manifest(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:
                raise ResolveError(f"cannot read the pack manifest {path}: {exc}", missing="pack") from None
            except ManifestError as exc:
                raise ResolveError(f"{path}: {exc}", missing="pack") from None
            self._manifests.setdefault(manifest.pack, {})[manifest.version] = manifest

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names.

        Raises:
            ResolveError: no local pack has that pack, version or action.
        """
        parsed = parse_ref(ref)
        versions = self._versions(parsed.pack)
        resolved = resolve(parsed, versions, versions.__getitem__)
        self.pins[ref] = resolved.pin
        return resolved.action.input_schema

    def output_schema(self, ref: str) -> dict[str, Any] | None:
        """The outputSchema of the action `ref` names (the schema a test's answers are held to).

        Raises:
            ResolveError: no local pack has that pack, version or action.
        """
        parsed = parse_ref(ref)
        versions = self._versions(parsed.pack)
        return resolve(parsed, versions, versions.__getitem__).action.output_schema

    def trigger(self, ref: str) -> Trigger:
        """The trigger `ref` (`ns/pack/key@1`) names.

        Raises:
            ResolveError: no local pack has that pack, version or trigger.
        """
        parsed = parse_ref(ref)
        versions = self._versions(parsed.pack)
        resolved = resolve_trigger(parsed, versions, versions.__getitem__)
        self.pins[ref] = resolved.pin
        return resolved.trigger

    def _versions(self, pack: str) -> dict[str, Manifest]:
        """The local versions of `pack` (ResolveError: none)."""
        versions = self._manifests.get(pack)
        if not versions:
            known = ", ".join(sorted(self._manifests)) or "none"
            raise ResolveError(f"pack {pack} is not among the local packs ({known})", missing="pack")
        return versions


class RegistryResolver:
    """Resolves refs with the api of a b3os installation (the resolution the api itself runs)."""

    def __init__(self, api_url: str, api_key: str, *, timeout_s: float = 10.0) -> None:
        self._base = api_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self._base, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s
        )
        self.pins: dict[str, str] = {}

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def __enter__(self) -> RegistryResolver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names, as the api resolves it.

        Raises:
            ResolveError: the api cannot be reached, or has no such pack, version or action.
        """
        parse_ref(ref)
        try:
            response = self._client.get("/v1/actions/resolve", params={"ref": ref})
        except httpx.HTTPError as exc:
            raise ResolveError(
                f"the registry at {self._base} cannot be reached ({type(exc).__name__})", missing="pack"
            ) from None
        body = _json(response)
        if response.status_code == 404:
            problem = _problem(body).removeprefix(f"{ref}: ")
            raise ResolveError(problem, missing="action")
        if response.status_code in (401, 403):
            raise ResolveError(
                f"the registry refused the API key ({response.status_code}: {_problem(body)})", missing="pack"
            )
        if response.status_code != 200 or not isinstance(body, dict):
            raise ResolveError(
                f"the registry answered {response.status_code} for {ref}: {_problem(body)}", missing="pack"
            )
        action = body.get("action")
        if isinstance(body.get("pin"), str):
            self.pins[ref] = body["pin"]
        schema = action.get("inputSchema") if isinstance(action, dict) else None
        return schema if isinstance(schema, dict) else None

    def trigger(self, ref: str) -> Trigger:
        """The trigger `ref` (`ns/pack/key@1`) names, resolved by the one rule over the registry's versions
        of its pack (`GET /v1/actions/packs/{ns}/{name}/versions`, then the version's manifest).

        Raises:
            ResolveError: the api cannot be reached, or has no such pack, version or trigger.
        """
        parsed = parse_ref(ref)
        base = f"/v1/actions/packs/{parsed.pack}"
        listed = self._get(f"{base}/versions", parsed.pack)
        versions = [
            v["version"] for v in listed.get("versions", []) if isinstance(v, dict) and "version" in v
        ]

        def manifest_of(version: str) -> Manifest:
            try:
                return parse_manifest(self._get(f"{base}/versions/{version}/manifest", parsed.pack))
            except ManifestError as exc:
                raise ResolveError(f"{parsed.pack}@{version}: {exc}", missing="version") from None

        resolved = resolve_trigger(parsed, versions, manifest_of)
        self.pins[ref] = resolved.pin
        return resolved.trigger

    def _get(self, path: str, pack: str) -> dict[str, Any]:
        try:
            response = self._client.get(path)
        except httpx.HTTPError as exc:
            raise ResolveError(
                f"the registry at {self._base} cannot be reached ({type(exc).__name__})", missing="pack"
            ) from None
        body = _json(response)
        if response.status_code == 404:
            raise ResolveError(f"pack {pack} is not in the registry", missing="pack")
        if response.status_code != 200 or not isinstance(body, dict):
            raise ResolveError(
                f"the registry answered {response.status_code} for {pack}: {_problem(body)}", missing="pack"
            )
        return body


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _problem(body: Any) -> str:
    """The error sentence of an api answer, when it has one."""
    if isinstance(body, dict):
        error = body.get("error")
        inner: dict[str, Any] = error if isinstance(error, dict) else body
        message = inner.get("message") or inner.get("detail")
        if isinstance(message, str):
            return message
    return "no error sentence"
