"""Reading the registry: packs, their versions by semver, refs resolved to versions, MCP tools.

Packs are a public catalog: any authenticated key reads every pack. Versions order by
(major, minor, patch); refs resolve by the one rule of `packs.resolve` (`resolve` here), over the
versions in the database. A version's manifest is parsed into `packs.manifest.Manifest` once per
process (`typed`): versions are immutable, so the parse is cached by content hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from threading import Lock
from typing import Any

from cachetools import LRUCache
from sqlalchemy import bindparam
from sqlmodel import Session, col, select

from api.errors import NotFound
from api.models import PackVersion
from api.rawsql import Reads
from packs import resolve as resolving
from packs.errors import ManifestError
from packs.manifest import Manifest, parse_manifest
from packs.refs import ActionRef

_TYPED_MAX = 512
_typed: LRUCache[str, Manifest] = LRUCache(maxsize=_TYPED_MAX)
_typed_lock = Lock()


def newest_first(versions: Sequence[PackVersion]) -> list[PackVersion]:
    """Versions of packs, newest first by the one rule (`packs.resolve.newest_first`)."""
    rank = {v: i for i, v in enumerate(resolving.newest_first(row.version for row in versions))}
    return sorted((row for row in versions if row.version in rank), key=lambda row: rank[row.version])


def versions_of(session: Session, *, pack: str) -> list[PackVersion]:
    """Every version of a pack, newest first (NotFound when the pack has none)."""
    versions = newest_first(session.exec(select(PackVersion).where(PackVersion.pack == pack)).all())
    if not versions:
        raise NotFound(f"There is no pack {pack[:300]} in the registry.", field="pack")
    return versions


def newest(session: Session, *, pack: str, major: int | None = None) -> PackVersion | None:
    """The newest version of a pack (of one major version when given, as `@<major>` resolves), or None."""
    listed = session.exec(select(PackVersion.version).where(col(PackVersion.pack) == pack)).all()
    version = resolving.newest(listed, major=major)
    return None if version is None else get_version(session, pack=pack, version=version)


_ROWS_AT_ONCE = 500  # ids in one `IN (...)`: well under SQLite's limit of bound parameters


def newest_of_each(session: Session) -> dict[str, PackVersion]:
    """The newest version of every pack, by pack name in order: every version's name is read, then only
    the newest rows (not every version's manifest and files: GET /v1/packs took 278 ms at 500 packs of
    3 versions that way, 55 ms so)."""
    listed: dict[str, list[tuple[str, int | None]]] = {}
    for id_, pack, version in session.exec(select(PackVersion.id, PackVersion.pack, PackVersion.version)):
        listed.setdefault(pack, []).append((version, id_))
    ids = []
    for versions in listed.values():
        newest_version = resolving.newest(v for v, _ in versions)
        ids += [id_ for v, id_ in versions if v == newest_version]
    found: dict[str, PackVersion] = {}
    for start in range(0, len(ids), _ROWS_AT_ONCE):
        for row in session.exec(
            select(PackVersion).where(col(PackVersion.id).in_(ids[start : start + _ROWS_AT_ONCE]))
        ):
            found[row.pack] = row
    return dict(sorted(found.items()))


def get_version(session: Session, *, pack: str, version: str) -> PackVersion:
    """One version of a pack, or NotFound naming it."""
    row = session.exec(
        select(PackVersion).where(PackVersion.pack == pack, PackVersion.version == version)
    ).first()
    if row is None:
        raise NotFound(f"There is no version {version[:100]} of the pack {pack[:300]}.", field="version")
    return row


def typed(version: PackVersion) -> Manifest:
    """The version's manifest as typed models, parsed once per process (keyed by its content hash).

    Raises:
        ResolveError: the stored manifest no longer fits this engine's models (named, never a 500).
    """
    key = f"{version.pack}@{version.version}#{version.content_hash}"
    with _typed_lock:
        found = _typed.get(key)
    if found is not None:
        return found
    try:
        manifest = parse_manifest(version.manifest)
    except ManifestError as exc:
        raise resolving.ResolveError(
            f"{version.pack}@{version.version} cannot be run by this engine: {exc}", missing="version"
        ) from None
    with _typed_lock:
        _typed[key] = manifest
    return manifest


def resolve(session: Session, *, ref: ActionRef) -> tuple[resolving.Resolved, PackVersion]:
    """Resolve a ref by the one rule over the registry's versions of its pack.

    Raises:
        ResolveError: no such pack, version or action (`missing` says which), with a sentence.
    """
    listed = session.exec(select(PackVersion.version).where(col(PackVersion.pack) == ref.pack)).all()
    rows: dict[str, PackVersion] = {}

    def manifest_of(version: str) -> Manifest:
        rows[version] = get_version(session, pack=ref.pack, version=version)
        return typed(rows[version])

    resolved = resolving.resolve(ref, listed, manifest_of)
    return resolved, rows[resolved.version]


def resolve_trigger(session: Session, *, ref: ActionRef) -> resolving.ResolvedTrigger:
    """Resolve a trigger ref by the one rule over the registry's versions of its pack (ResolveError)."""
    listed = session.exec(select(PackVersion.version).where(col(PackVersion.pack) == ref.pack)).all()
    return resolving.resolve_trigger(
        ref, listed, lambda version: typed(get_version(session, pack=ref.pack, version=version))
    )


KNOWN_MAX = 512
KnownVersions = dict[tuple[str, str], tuple[Manifest, dict[str, Any]]]
"""Versions a process has read, (pack, version) -> (typed manifest, manifest): a cache of one engine."""


_VERSIONS_OF = select(PackVersion.version).where(col(PackVersion.pack) == bindparam("pack"))


def resolve_known(
    reads: Reads, *, ref: ActionRef, known: KnownVersions
) -> tuple[resolving.Resolved, dict[str, Any]]:
    """`resolve`, through a cache of the versions already read (the call path's; one per engine).

    A version is immutable (never changed nor deleted), so an exact ref (`@1.2.3`) found in `known` needs no
    query at all, and a version once read is never read again. A major ref (`@1`) still reads the pack's
    version list every time, so it picks up a newer version the moment it is published.

    Returns:
        The resolution and the version's manifest (the stored JSON).

    Raises:
        ResolveError: as `resolve`.
    """
    if ref.is_exact and (ref.pack, ref.version) in known:
        listed: Sequence[str] = [ref.version]
    else:
        # A plain column read on the driver: SQLAlchemy's execution costs more than the read (api.rawsql).
        listed = [row[0] for row in reads.run(_VERSIONS_OF, {"pack": ref.pack}).rows]

    read: dict[str, tuple[Manifest, dict[str, Any]]] = {}  # this resolution's, whatever `known` drops

    def manifest_of(version: str) -> Manifest:
        found = known.get((ref.pack, version))
        if found is None:
            row = get_version(reads.session(), pack=ref.pack, version=version)
            if len(known) >= KNOWN_MAX:  # a bound, not an eviction policy: any registry's working set fits
                known.clear()
            found = known[(ref.pack, version)] = (typed(row), row.manifest)
        read[version] = found
        return found[0]

    resolved = resolving.resolve(ref, listed, manifest_of)
    return resolved, read[resolved.version][1]


def actions_of(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's action objects."""
    actions = manifest.get("actions")
    return [a for a in actions if isinstance(a, dict)] if isinstance(actions, list) else []


def find_action(manifest: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The action of that key, or None."""
    return next((a for a in actions_of(manifest) if a.get("key") == key), None)


def action_summaries(version: PackVersion) -> list[dict[str, Any]]:
    """Each action's key, title, description and exact pin `ns/pack/action@1.0.0`."""
    return [
        {
            "key": a.get("key"),
            "title": a.get("title"),
            "description": a.get("description"),
            "ref": f"{version.pack}/{a.get('key')}@{version.version}",
        }
        for a in actions_of(version.manifest)
    ]


def mcp_tools(version: PackVersion) -> list[dict[str, Any]]:
    """MCP tool definitions of a version: `{pack}__{action}` with description and schemas."""
    name = version.pack.partition("/")[2]
    tools = []
    for action in actions_of(version.manifest):
        tool: dict[str, Any] = {
            "name": f"{name}__{action.get('key')}",
            "title": action.get("title"),
            "description": action.get("description"),
            "inputSchema": action.get("inputSchema") or {"type": "object"},
        }
        if action.get("outputSchema"):
            tool["outputSchema"] = action["outputSchema"]
        tools.append(tool)
    return tools
