"""The control plane's tables, layered as in the FastAPI template: XBase, XCreate, X(table=True), XPublic.

Tables: organizations, api_keys (hash only), publishers (namespace -> org), signing_keys (Ed25519 by
kid), blob_uploads (which org uploaded which blob), blobs (a blob's bytes when B3OS_BLOB_STORE=database),
packs, pack_versions (immutable; `seq` orders the node feed), nodes, node_credentials (a hash and a
call key, never the secret). The schema's revisions are in api/alembic/versions/.
Request models forbid unknown fields. Times are timezone-aware UTC; money is integer micro-USD.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import ConfigDict, field_validator, model_validator
from sqlalchemy import JSON, BigInteger, Column, DateTime, LargeBinary, TypeDecorator, UniqueConstraint
from sqlmodel import Field, SQLModel

from api.accounts.scopes import KNOWN_SCOPES, SCOPE_PATTERN, is_known
from api.numbers import Integral, integral


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timestamp stored as UTC and always read back timezone-aware (SQLite forgets the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value


_FORBID = ConfigDict(extra="forbid")  # type: ignore[typeddict-unknown-key]
# Request bodies with numbers: JSON `true` or `"5"` is not a number of slots or micro-USD.
_FORBID_STRICT = ConfigDict(extra="forbid", strict=True)  # type: ignore[typeddict-unknown-key]


# --- organizations -------------------------------------------------------------------------------


class OrganizationBase(SQLModel):
    name: str = Field(min_length=1, max_length=200)


class OrganizationCreate(OrganizationBase):
    model_config = _FORBID  # type: ignore[assignment]


class Organization(OrganizationBase, table=True):
    __tablename__ = "organizations"
    id: str = Field(primary_key=True, max_length=40)
    is_operator: bool = Field(default=False)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class OrganizationPublic(OrganizationBase):
    id: str
    is_operator: bool
    created_at: dt.datetime


# --- api keys ------------------------------------------------------------------------------------


class ApiKeyBase(SQLModel):
    name: str = Field(default="", max_length=200)
    scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    monthly_spend_cap_microusd: int | None = Field(default=None, ge=0, sa_type=BigInteger)


class ApiKeyCreate(ApiKeyBase):
    model_config = _FORBID_STRICT  # type: ignore[assignment]
    scopes: list[str] = Field(
        min_length=1,
        max_length=50,
        schema_extra={"json_schema_extra": {"items": {"type": "string", "pattern": SCOPE_PATTERN.pattern}}},
    )
    _cap_integral = field_validator("monthly_spend_cap_microusd", mode="before")(integral)

    @field_validator("scopes")
    @classmethod
    def _scope_names(cls, scopes: list[str]) -> list[str]:
        for scope in scopes:
            if not SCOPE_PATTERN.fullmatch(scope):
                raise ValueError(f"{scope!r} is not a scope name such as actions:call or actions:*")
            if not is_known(scope):
                raise ValueError(
                    f"{scope!r} is not a scope b3os grants: use one of {', '.join(KNOWN_SCOPES)}, "
                    "an area's wildcard such as actions:*, or *"
                )
        return scopes


class ApiKey(ApiKeyBase, table=True):
    __tablename__ = "api_keys"
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(foreign_key="organizations.id", index=True, max_length=40)
    prefix: str = Field(unique=True, max_length=40)
    key_hash: str = Field(max_length=64)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    revoked_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)


class ApiKeyPublic(ApiKeyBase):
    id: str
    org_id: str
    prefix: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(description="the secret, shown once")


# --- publishers and signing keys -----------------------------------------------------------------


class PublisherBase(SQLModel):
    namespace: str = Field(primary_key=True, max_length=200)
    org_id: str = Field(foreign_key="organizations.id", index=True, max_length=40)


class PublisherCreate(SQLModel):
    model_config = _FORBID  # type: ignore[assignment]
    org_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="the organization to give it to; default the caller's own",
    )


class Publisher(PublisherBase, table=True):
    __tablename__ = "publishers"
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class PublisherPublic(PublisherBase):
    created_at: dt.datetime


class SigningKeyBase(SQLModel):
    kid: str = Field(primary_key=True, max_length=300)
    public_key: str = Field(max_length=100, description="raw Ed25519 public key, standard base64")


class SigningKeyCreate(SigningKeyBase):
    model_config = _FORBID  # type: ignore[assignment]


class SigningKey(SigningKeyBase, table=True):
    __tablename__ = "signing_keys"
    namespace: str = Field(foreign_key="publishers.namespace", index=True, max_length=200)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    revoked_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)


class SigningKeyPublic(SigningKeyBase):
    namespace: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


# --- blobs ---------------------------------------------------------------------------------------


class BlobUpload(SQLModel, table=True):
    """Which organization uploaded which blob (the bytes are in the blob store: api.registry.blobs)."""

    __tablename__ = "blob_uploads"
    sha256: str = Field(primary_key=True, max_length=64)
    org_id: str = Field(primary_key=True, foreign_key="organizations.id", max_length=40)
    bytes: int = Field(sa_type=BigInteger)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class PublishedBlob(SQLModel, table=True):
    """A blob that some published pack version holds: nodes may read these, and only these."""

    __tablename__ = "published_blobs"
    sha256: str = Field(primary_key=True, max_length=64)


class BlobContent(SQLModel, table=True):
    """A blob's bytes, when the blob store is the database (B3OS_BLOB_STORE=database; api.registry.blobs)."""

    __tablename__ = "blobs"
    sha256: str = Field(primary_key=True, max_length=64)
    size: int = Field(sa_type=BigInteger)
    data: bytes = Field(sa_type=LargeBinary)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


# --- packs ---------------------------------------------------------------------------------------


class Pack(SQLModel, table=True):
    __tablename__ = "packs"
    id: str = Field(primary_key=True, max_length=300, description="ns/name")
    namespace: str = Field(foreign_key="publishers.namespace", index=True, max_length=200)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class PackVersionBase(SQLModel):
    pack: str = Field(foreign_key="packs.id", index=True, max_length=300)
    version: str = Field(max_length=100)
    content_hash: str = Field(max_length=80)
    kid: str = Field(max_length=300)


class PackVersion(PackVersionBase, table=True):
    __tablename__ = "pack_versions"
    __table_args__ = (UniqueConstraint("pack", "version", name="uq_pack_versions_pack_version"),)
    id: int | None = Field(default=None, primary_key=True)
    major: int
    minor: int
    patch: int
    prerelease: str = Field(default="", max_length=100, description="empty for a release")
    manifest: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    files: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    seq: int = Field(unique=True, sa_type=BigInteger, description="position in the node feed")
    org_id: str = Field(foreign_key="organizations.id", max_length=40)
    published_by: str = Field(max_length=40, description="the api key id that published")
    published_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class PackVersionPublic(PackVersionBase):
    published_at: dt.datetime


# --- nodes ---------------------------------------------------------------------------------------


class NodeBase(SQLModel):
    node_id: str = Field(
        primary_key=True, min_length=1, max_length=100, schema_extra={"pattern": r"^[A-Za-z0-9._-]+$"}
    )
    url: str = Field(min_length=1, max_length=500)
    slots_total: int = Field(ge=0, le=10_000)
    slots_free: int = Field(ge=0, le=10_000)
    installed: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


NODE_SLOTS_MAX = 64
"""The most calls a node runs at once (node.config's bound on `B3OS_SLOTS`): a heartbeat saying more is
refused, so that no node can draw more calls than a node can run."""


class NodeHeartbeat(NodeBase):
    model_config = _FORBID_STRICT  # type: ignore[assignment]

    slots_total: Integral = Field(ge=1, le=NODE_SLOTS_MAX)
    slots_free: Integral = Field(ge=0, le=NODE_SLOTS_MAX)
    isolation: str | None = Field(
        default=None, max_length=40, schema_extra={"pattern": r"^(sandbox|microvm/(kvm|tcg))$"}
    )  # what isolates the node's calls (B3OS_NODE_DRIVER, and its accelerator); checked, not stored

    @model_validator(mode="after")
    def _free_within_total(self) -> NodeHeartbeat:
        if self.slots_free > self.slots_total:
            raise ValueError(f"slots_free ({self.slots_free}) is more than slots_total ({self.slots_total})")
        return self


class Node(NodeBase, table=True):
    __tablename__ = "nodes"
    first_seen: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    last_seen: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    bad_until: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)  # api.nodes.mark_bad


class NodePublic(NodeBase):
    last_seen: dt.datetime


class NodeCredential(SQLModel, table=True):
    """A node's own credential (api.accounts.node_credentials): its secret's hash, the key of its calls."""

    __tablename__ = "node_credentials"
    node_id: str = Field(primary_key=True, max_length=100)
    prefix: str = Field(unique=True, max_length=40)
    secret_hash: str = Field(max_length=64)
    call_key: str = Field(max_length=64)
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    revoked_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime)
