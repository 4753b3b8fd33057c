"""The pack registry: publish a signed version, read packs, versions, manifests and MCP tools."""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from api.accounts.scopes import ACTIONS_WRITE, TOOLS_PUBLISH
from api.deps import CheckersDep, Principal, PrincipalDep, ReadSessionDep, SessionDep, require
from api.errors import InvalidRequest, NotFound, error_responses
from api.models import PackVersion
from api.numbers import Integral
from api.params import Namespace, PackName, Version
from api.registry import catalog
from api.registry.publishing import publish, read_fixtures
from api.routes.blobs import BlobsDep
from packs.checks import is_tool_pack
from packs.hashing import BundleFile
from packs.js_files import missing_entries
from packs.refs import MAX_REF_LENGTH, REF_PATTERN
from packs.resolve import ResolveError, parse_ref

router = APIRouter(prefix="/v1/actions/packs", tags=["registry"])
resolve_router = APIRouter(prefix="/v1/actions", tags=["registry"])
# A hosted tool (a pack with a tool section or a vm action) also needs TOOLS_PUBLISH: see publish_pack.
Publisher = Annotated[Principal, Depends(require(ACTIONS_WRITE))]
MAX_FILES = 1000


class FileRecord(BaseModel):
    """One bundle file: its POSIX path in the pack, sha256 (lowercase hex) and size."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str = Field(min_length=1, max_length=1000)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: Integral = Field(ge=0, le=64 * 1024 * 1024)


class PublishRequest(BaseModel):
    """A signed manifest and the records of its bundle files (each uploaded first as a blob)."""

    model_config = ConfigDict(extra="forbid")
    manifest: dict[str, Any]
    files: list[FileRecord] = Field(max_length=MAX_FILES)


class ActionSummary(BaseModel):
    key: str | None
    title: str | None
    description: str | None
    ref: str = Field(description="the exact pin, ns/pack/action@1.0.0")


class VersionSummary(BaseModel):
    version: str
    content_hash: str
    kid: str
    published_at: dt.datetime


class PackSummary(VersionSummary):
    pack: str
    title: str | None
    description: str | None
    publisher: dict[str, Any] | None
    actions: list[ActionSummary]


class PackList(BaseModel):
    packs: list[PackSummary]


class VersionList(BaseModel):
    pack: str
    versions: list[VersionSummary]


class ToolList(BaseModel):
    pack: str
    version: str
    tools: list[dict[str, Any]]


def _summary(v: PackVersion) -> PackSummary:
    m = v.manifest
    return PackSummary(
        pack=v.pack,
        version=v.version,
        content_hash=v.content_hash,
        kid=v.kid,
        published_at=v.published_at,
        title=m.get("title"),
        description=m.get("description"),
        publisher=m.get("publisher"),
        actions=[ActionSummary(**a) for a in catalog.action_summaries(v)],
    )


@router.post(
    "", status_code=201, response_model=PackSummary, responses=error_responses(400, 403, 409, 413, 503)
)
async def publish_pack(
    body: PublishRequest, principal: Publisher, session: SessionDep, blobs: BlobsDep, checkers: CheckersDep
) -> PackSummary:
    """Publish a signed pack version whose files were uploaded as blobs; versions are immutable.

    The publish checks run in a checker process of the api (`B3OS_MANIFEST_CHECK_S`, default 5 s).
    """
    if is_tool_pack(body.manifest):
        principal.check(TOOLS_PUBLISH)  # a tool runs its publisher's code on the nodes
    files = [BundleFile(path=f.path, sha256=f.sha256, bytes=f.bytes) for f in body.files]
    reading = partial(read_fixtures, session, blobs, org_id=principal.org_id, files=files)
    sizes, fixtures = await to_thread.run_sync(reading)
    violations = await checkers.manifest(principal.org_id, body.manifest, fixtures=fixtures)
    violations = violations or missing_entries(body.manifest, {f.path for f in files}) or sizes
    publishing = partial(
        publish,
        session,
        blobs=blobs,
        org_id=principal.org_id,
        key_id=principal.key_id,
        manifest=body.manifest,
        violations=violations,
        files=files,
    )
    return _summary(await to_thread.run_sync(publishing))


@router.get("", response_model=PackList)
def list_packs(_: PrincipalDep, session: ReadSessionDep) -> PackList:
    """Every pack at its newest version."""
    return PackList(packs=[_summary(v) for v in catalog.newest_of_each(session).values()])


@router.get("/{namespace}/{name}", response_model=PackSummary, responses=error_responses(404))
def get_pack(namespace: Namespace, name: PackName, _: PrincipalDep, session: ReadSessionDep) -> PackSummary:
    """The pack at its newest version (by semver), with the exact pin of each action."""
    return _summary(catalog.versions_of(session, pack=f"{namespace}/{name}")[0])


@router.get("/{namespace}/{name}/versions", response_model=VersionList, responses=error_responses(404))
def list_versions(
    namespace: Namespace, name: PackName, _: PrincipalDep, session: ReadSessionDep
) -> VersionList:
    """Every version of the pack, newest first."""
    pack = f"{namespace}/{name}"
    versions = catalog.versions_of(session, pack=pack)
    return VersionList(pack=pack, versions=[VersionSummary.model_validate(v.model_dump()) for v in versions])


@router.get("/{namespace}/{name}/versions/{version}/manifest", responses=error_responses(404))
def get_manifest(
    namespace: Namespace, name: PackName, version: Version, _: PrincipalDep, session: ReadSessionDep
) -> dict[str, Any]:
    """The signed manifest of one version, as published."""
    return catalog.get_version(session, pack=f"{namespace}/{name}", version=version).manifest


@router.get("/{namespace}/{name}/tools", response_model=ToolList, responses=error_responses(404))
def list_tools(
    namespace: Namespace,
    name: PackName,
    _: PrincipalDep,
    session: ReadSessionDep,
    version: Annotated[str | None, Query(description="an exact version; default the newest")] = None,
) -> ToolList:
    """MCP tool definitions of the pack's actions: `{pack}__{action}` with description and inputSchema."""
    pack = f"{namespace}/{name}"
    row = (
        catalog.get_version(session, pack=pack, version=version)
        if version
        else catalog.versions_of(session, pack=pack)[0]
    )
    return ToolList(pack=pack, version=row.version, tools=catalog.mcp_tools(row))


class ResolvedAction(BaseModel):
    """A ref resolved by the one rule every call, MCP tool and routine step uses."""

    ref: str = Field(description="the ref as asked")
    pin: str = Field(description="the exact ref that runs, ns/pack/action@1.2.3")
    pack: str
    version: str
    kind: str = Field(description="the action's impl.kind: vm or http")
    action: dict[str, Any] = Field(description="the action's key, title, description and schemas")


@resolve_router.get("/resolve", response_model=ResolvedAction, responses=error_responses(400, 404))
def resolve_action(
    ref: Annotated[
        str,
        Query(
            max_length=MAX_REF_LENGTH,
            description="ns/pack/action@1 or @1.2.3",
            json_schema_extra={"pattern": REF_PATTERN},
        ),
    ],
    _: PrincipalDep,
    session: ReadSessionDep,
) -> ResolvedAction:
    """Resolve an action ref to the exact version and action a call of it runs now."""
    try:
        resolved, _row = catalog.resolve(session, ref=parse_ref(ref))
    except ResolveError as exc:
        if exc.missing == "ref":
            raise InvalidRequest(str(exc), field="ref") from None
        raise NotFound(f"{ref}: {exc}", field="ref", missing=exc.missing) from None
    action = resolved.action.model_dump(
        mode="json", by_alias=True, include={"key", "title", "description", "input_schema", "output_schema"}
    )
    return ResolvedAction(
        ref=ref,
        pin=resolved.pin,
        pack=resolved.pack,
        version=resolved.version,
        kind=resolved.kind,
        action=action,
    )
