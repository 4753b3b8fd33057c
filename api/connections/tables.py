"""The table of connections and its models, layered as in the FastAPI template.

`connections`: one row per (organization, pack, connection key): the connection's kind, its
non-secret params, a hint (the last 4 characters of a long enough secret) and the secret sealed to
the egress proxy (`sealed`, a `b3seal-v1.` token bound to the organization and the row's id). The
sealed token never leaves the api except toward the egress proxy.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import ConfigDict
from sqlalchemy import JSON, Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from api.jsonbody import MAX_SAFE_INTEGER
from api.models import UTCDateTime, utcnow

SECRET_MAX_CHARS = 4096
_TEXT: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": SECRET_MAX_CHARS,
    "pattern": r"^[^\x00-\x1f\x7f-\x9f]*$",  # no control character (api.connections.service)
}
SECRET_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {**_TEXT, "title": "api_key or bearer"},
        {
            "title": "basic",
            "type": "object",
            "properties": {
                "username": {**_TEXT, "pattern": r"^[^:\x00-\x1f\x7f-\x9f]*$"},
                "password": _TEXT,
            },
            "required": ["username", "password"],
            "additionalProperties": False,
        },
        {
            "title": "oauth2",
            "type": "object",
            "properties": {
                "access_token": _TEXT,
                "refresh_token": _TEXT,
                "token_url": {**_TEXT, "pattern": "^https://[^/?#]", "description": "an https URL"},
                "client_id": _TEXT,
                "client_secret": _TEXT,
                "expires_at": {
                    "anyOf": [
                        {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER},
                        {"type": "string", "format": "date-time"},
                    ],
                    "description": "unix seconds, or an RFC 3339 date and time",
                },
            },
            "required": ["access_token"],
            "additionalProperties": False,
        },
    ]
}
"""The shapes a secret takes, one per connection kind, as `api.connections.service.check_secret` checks
them (which one a connection takes is the pack's declaration, which no OpenAPI document can hold)."""


class ConnectionBase(SQLModel):
    pack: str = Field(min_length=1, max_length=300, description="the pack, ns/name")
    connection: str = Field(min_length=1, max_length=200, description="the key of the pack's connection")


class ConnectionCreate(ConnectionBase):
    """A credential to add (or replace); `secret` is checked by hand so that no error ever echoes it."""

    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]
    params: dict[str, Any] | None = Field(default=None, description="the non-secret params; default {}")
    secret: Any = Field(
        description='a text (api_key, bearer), {"username", "password"} (basic), or {"access_token", '
        '"refresh_token"?, "expires_at"?, "token_url"?, "client_id"?, "client_secret"?} (oauth2)',
        schema_extra={"json_schema_extra": SECRET_SCHEMA},
    )


class ConnectionRecord(ConnectionBase, table=True):
    __tablename__ = "connections"
    __table_args__ = (
        UniqueConstraint("org_id", "pack", "connection", name="uq_connections_org_pack_connection"),
    )
    id: str = Field(primary_key=True, max_length=40)
    org_id: str = Field(foreign_key="organizations.id", index=True, max_length=40)
    kind: str = Field(max_length=20)
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    hosts: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]")
    )
    hint: str = Field(default="", max_length=4)
    sealed: str = Field(sa_column=Column(Text, nullable=False), description="sealed to the egress proxy")
    created_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: dt.datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class ConnectionPublic(ConnectionBase):
    """A connection as answered: never its secret nor its sealed token."""

    id: str
    kind: str
    params: dict[str, Any]
    hosts: list[str] = Field(
        description="the hosts the egress proxy sends the secret to (exact or *.), as sealed"
    )
    hint: str = Field(description="the secret's last 4 characters when it has at least 12, else empty")
    created_at: dt.datetime


class ConnectionListed(ConnectionPublic):
    updated_at: dt.datetime


class ConnectionList(SQLModel):
    items: list[ConnectionListed]
