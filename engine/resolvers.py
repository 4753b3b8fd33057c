"""Action resolvers for validation: find an action's inputSchema from a `uses:` ref.

- `LocalPackResolver`: pack directories on disk (each with a `b3pack.json`), for offline checks.
- `RegistryResolver`: the registry over HTTP, `GET {api}/v1/actions/packs/{ns}/{pack}/versions`
  (newest version of the ref's major) and `.../versions/{version}/manifest`.

Both raise `ResolveError` with a sentence when a ref cannot be resolved. Neither is used inside a
workflow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from packs.errors import RefError
from packs.names import is_semver
from packs.refs import ActionRef


class ResolveError(Exception):
    """A `uses:` ref cannot be resolved; the message says why."""


def _parse(ref: str) -> ActionRef:
    try:
        return ActionRef.parse(ref)
    except RefError as exc:
        raise ResolveError(str(exc)) from None


def _semver_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def pick_version(ref: ActionRef, versions: Iterable[str]) -> str:
    """The version a ref runs: itself when exact, else the newest of its major.

    Raises:
        ResolveError: no listed version fits.
    """
    listed = sorted({v for v in versions if is_semver(v)}, key=_semver_key)
    if ref.is_exact:
        if ref.version in listed:
            return ref.version
        raise ResolveError(
            f"{ref.pack} has no version {ref.version} (versions: {', '.join(listed) or 'none'})"
        )
    matching = [v for v in listed if _semver_key(v)[0] == ref.major]
    if not matching:
        raise ResolveError(
            f"{ref.pack} has no version {ref.major}.x.y (versions: {', '.join(listed) or 'none'})"
        )
    return matching[-1]


def action_input_schema(ref: ActionRef, manifest: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The inputSchema of the ref's action in a manifest.

    Raises:
        ResolveError: the manifest has no such action.
    """
    actions = manifest.get("actions")
    if not isinstance(actions, list):
        actions = []
    keys = []
    for action in actions:
        if isinstance(action, dict):
            keys.append(str(action.get("key")))
            if action.get("key") == ref.action:
                schema = action.get("inputSchema")
                return schema if isinstance(schema, dict) else None
    raise ResolveError(
        f"{ref.pack}@{version} has no action '{ref.action}' (actions: {', '.join(keys) or 'none'})"
    )


class LocalPackResolver:
    """Resolves refs against pack directories (each holding a `b3pack.json`)."""

    def __init__(self, directories: Iterable[str | Path]) -> None:
        """Read each directory's manifest.

        Raises:
            ResolveError: a directory has no readable b3pack.json.
        """
        self._manifests: dict[str, list[dict[str, Any]]] = {}
        for directory in directories:
            path = Path(directory) / "b3pack.json"
            try:
                manifest = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ResolveError(f"cannot read the pack manifest {path}: {exc}") from None
            if not isinstance(manifest, dict) or not isinstance(manifest.get("pack"), str):
                raise ResolveError(f'{path} is not a pack manifest: it has no "pack"')
            self._manifests.setdefault(manifest["pack"], []).append(manifest)

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names.

        Raises:
            ResolveError: no local pack has that pack, version or action.
        """
        parsed = _parse(ref)
        manifests = self._manifests.get(parsed.pack)
        if not manifests:
            known = ", ".join(sorted(self._manifests)) or "none"
            raise ResolveError(f"pack {parsed.pack} is not among the local packs ({known})")
        by_version = {str(m.get("version")): m for m in manifests}
        version = pick_version(parsed, by_version)
        return action_input_schema(parsed, by_version[version], version)


class RegistryResolver:
    """Resolves refs against the registry of a b3os api over HTTP."""

    def __init__(self, api_url: str, api_key: str, *, timeout_s: float = 10.0) -> None:
        self._base = api_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self._base, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s
        )
        self._versions: dict[str, list[str]] = {}

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def __enter__(self) -> RegistryResolver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        """The inputSchema of the action `ref` names, from the registry.

        Raises:
            ResolveError: the registry cannot be reached, or has no such pack, version or action.
        """
        parsed = _parse(ref)
        if parsed.pack not in self._versions:
            body = self._get(f"/v1/actions/packs/{parsed.pack}/versions", what=f"pack {parsed.pack}")
            self._versions[parsed.pack] = _version_list(body)
        version = pick_version(parsed, self._versions[parsed.pack])
        body = self._get(
            f"/v1/actions/packs/{parsed.pack}/versions/{version}/manifest", what=f"{parsed.pack}@{version}"
        )
        inner = body.get("manifest")
        return action_input_schema(parsed, inner if isinstance(inner, dict) else body, version)

    def _get(self, path: str, *, what: str) -> dict[str, Any]:
        try:
            response = self._client.get(path)
        except httpx.HTTPError as exc:
            raise ResolveError(
                f"the registry at {self._base} cannot be reached ({type(exc).__name__})"
            ) from None
        if response.status_code == 404:
            raise ResolveError(f"{what} is not in the registry")
        if response.status_code in (401, 403):
            raise ResolveError(
                f"the registry refused the API key ({response.status_code}{_problem(response)})"
            )
        if response.status_code != 200:
            raise ResolveError(f"the registry answered {response.status_code} for {what}{_problem(response)}")
        try:
            body = response.json()
        except ValueError:
            raise ResolveError(f"the registry's answer for {what} is not JSON") from None
        if isinstance(body, list):
            return {"versions": body}
        if not isinstance(body, dict):
            raise ResolveError(f"the registry's answer for {what} is not a JSON object")
        return body


def _version_list(body: dict[str, Any]) -> list[str]:
    items = body.get("versions", body.get("items", []))
    versions: list[str] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            versions.append(item)
        elif isinstance(item, dict) and isinstance(item.get("version"), str):
            versions.append(item["version"])
    return versions


def _problem(response: httpx.Response) -> str:
    """The error sentence of an api answer, when it has one."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict):
        error = body.get("error")
        inner: dict[str, Any] = error if isinstance(error, dict) else body
        message = inner.get("message") or inner.get("detail")
        if isinstance(message, str):
            return f": {message}"
    return ""
