"""Resolving an action ref to one pack version and one action: the one rule, for every surface.

    ns/pack/action@1.2.3   that exact version
    ns/pack/action@1       the newest release 1.x.y the registry has (by semver)

The version found must have the action; an older version that has it is never chosen instead.
`POST /v1/actions/call`, MCP, the registry reads, `b3os routine validate`, storing a routine and
starting its run all resolve through `resolve` here (the api over its database, the CLI over the
api's `GET /v1/actions/resolve` or over local pack directories), so what is validated is what runs:
a run records the exact pin (`ns/pack/action@1.2.3`) of each step when it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from packs.errors import PackError, RefError
from packs.manifest import Action, Manifest
from packs.names import is_semver
from packs.refs import ActionRef
from packs.triggers import Trigger


class ResolveError(PackError):
    """A ref names no pack, version or action of the registry; `missing` says which. The sentence does
    not repeat the ref: callers say it (`cannot resolve <ref>: ...`, `<ref>: ...`)."""

    def __init__(self, message: str, *, missing: str = "action") -> None:
        super().__init__(message)
        self.missing = missing  # "ref" (does not parse), "pack", "version" or "action"


@dataclass(frozen=True)
class Resolved:
    """A ref resolved: its exact version, the version's manifest (typed) and the action."""

    ref: ActionRef
    version: str
    manifest: Manifest
    action: Action

    @property
    def pack(self) -> str:
        """The pack id, `ns/name`."""
        return self.ref.pack

    @property
    def pin(self) -> str:
        """The exact ref of the version resolved: `ns/pack/action@1.2.3`."""
        return f"{self.ref.pack}/{self.ref.action}@{self.version}"

    @property
    def kind(self) -> str:
        """The action's `impl.kind`: `vm`, `http` or `js`."""
        return self.action.impl.kind


def _semver(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


def parse_ref(text: object) -> ActionRef:
    """Parse a ref, as a `ResolveError` (missing "ref") naming what is wrong."""
    try:
        return ActionRef.parse(text)  # type: ignore[arg-type]
    except RefError as exc:
        raise ResolveError(str(exc), missing="ref") from None


def newest_first(versions: Iterable[str]) -> list[str]:
    """A pack's versions, newest first by semver (what "newest" means for every caller)."""
    return sorted({v for v in versions if is_semver(v)}, key=_semver, reverse=True)


def newest(versions: Iterable[str], *, major: int | None = None) -> str | None:
    """The newest of a pack's versions (of one major version when given: what `@<major>` names), or None."""
    return next((v for v in newest_first(versions) if major is None or _semver(v)[0] == major), None)


def pick_version(ref: ActionRef, versions: Iterable[str]) -> str:
    """The version a ref names among the pack's versions.

    Raises:
        ResolveError: the pack has no versions, or none that the ref admits (the versions listed).
    """
    listed = newest_first(versions)[::-1]
    if not listed:
        raise ResolveError(f"pack {ref.pack} is not in the registry", missing="pack")
    if ref.is_exact:
        if ref.version in listed:
            return ref.version
        wanted = ref.version
    else:
        found = newest(listed, major=ref.major)
        if found is not None:
            return found
        wanted = f"{ref.major}.x.y"
    raise ResolveError(
        f"{ref.pack} has no version {wanted} (versions: {', '.join(listed)})", missing="version"
    )


def resolve(ref: ActionRef, versions: Iterable[str], manifest_of: Callable[[str], Manifest]) -> Resolved:
    """Resolve a ref against a pack's versions; `manifest_of(version)` gives a version's typed manifest.

    Raises:
        ResolveError: no such pack, version or action, with a sentence naming it.
    """
    version = pick_version(ref, versions)
    manifest = manifest_of(version)
    action = manifest.action(ref.action)
    if action is None:
        keys = ", ".join(a.key for a in manifest.actions) or "none"
        raise ResolveError(
            f"{ref.pack}@{version} has no action {ref.action!r} (actions: {keys})", missing="action"
        )
    return Resolved(ref=ref, version=version, manifest=manifest, action=action)


@dataclass(frozen=True)
class ResolvedTrigger:
    """A trigger ref (`ns/pack/key@1`, parsed as an action ref) resolved: its exact version and trigger."""

    ref: ActionRef
    version: str
    manifest: Manifest
    trigger: Trigger

    @property
    def pin(self) -> str:
        """The exact ref of the version resolved: `ns/pack/key@1.2.3`."""
        return f"{self.ref.pack}/{self.ref.action}@{self.version}"


def resolve_trigger(
    ref: ActionRef, versions: Iterable[str], manifest_of: Callable[[str], Manifest]
) -> ResolvedTrigger:
    """Resolve a trigger ref by the same rule as an action's (the version found must have the trigger).

    Raises:
        ResolveError: no such pack, version or trigger, with a sentence naming it.
    """
    version = pick_version(ref, versions)
    manifest = manifest_of(version)
    trigger = manifest.trigger(ref.action)
    if trigger is None:
        keys = ", ".join(t.key for t in manifest.triggers) or "none"
        raise ResolveError(
            f"{ref.pack}@{version} has no trigger {ref.action!r} (triggers: {keys})", missing="trigger"
        )
    return ResolvedTrigger(ref=ref, version=version, manifest=manifest, trigger=trigger)
