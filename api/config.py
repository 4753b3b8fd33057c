"""The control plane's settings: one pydantic-settings model, env prefix `B3OS_`.

Served through `get_settings` (a FastAPI dependency) so tests build an app with their own `Settings`.
`B3OS_DATABASE_URL` wins over `DATABASE_URL`; without either the database is the SQLite file
`<data_dir>/b3os.db`. Blobs live under `<data_dir>/blobs` unless `B3OS_BLOB_DIR` says otherwise, or in
the database with `B3OS_BLOB_STORE=database` (api.registry.blobs).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError
from starlette.requests import Request

from engine.runs import BUSY_TASK_QUEUE

MIB = 1024 * 1024
DATABASE_MAX_BYTES = 64 * MIB
"""The largest blob the database blob store takes (a row is written in one statement)."""
BlobStoreKind = Literal["filesystem", "database"]
# loopback and the private ranges (RFC 1918, IPv6 unique local): where a cluster's nodes usually are
DEFAULT_NODE_NETWORKS = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(value: str) -> list[IPNetwork]:
    """The CIDRs of a comma-separated list.

    Raises:
        ValueError: an entry is not a network; the sentence names it.
    """
    networks: list[IPNetwork] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry[:100]!r} is not a network such as 10.0.0.0/8 or fc00::/7") from None
    return networks


class Settings(BaseSettings):
    """Everything the api reads from its environment. A refused setting's error names the setting and
    says why, never the value it was given (tokens and secrets are settings too; a refused URL is shown
    with its password hidden)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Field(default=Path(".b3os"), description="the state directory of this installation")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default SQLite under data_dir"
    )
    blob_store: BlobStoreKind = Field(
        default="filesystem",
        description="where blobs are stored: filesystem (blob_dir) or database (the blobs table)",
    )
    blob_dir: Path | None = Field(default=None, description="where blobs are stored; default data_dir/blobs")
    node_networks: str = Field(
        default=DEFAULT_NODE_NETWORKS,
        description="the networks (CIDRs, comma-separated) a node's heartbeat URL may be on",
    )
    worker_token: str | None = Field(default=None, description="the bearer token routine workers present")
    hooks_secret: str | None = Field(
        default=None,
        min_length=32,
        description="the key each webhook subscription's signing secret is derived from "
        "(api.triggers.secrets); "
        "default: one kept in data_dir/hooks-secret (set it for several api replicas)",
    )
    trigger_retry_s: float = Field(
        default=5.0, gt=0, le=3600, description="how often pending trigger deliveries are started again"
    )
    max_blob_bytes: int = Field(default=64 * MIB, ge=1, description="the largest blob a PUT accepts")
    max_body_bytes: int = Field(default=2 * MIB, ge=1024, description="the largest JSON request body")
    routine_check_s: float = Field(
        default=5.0, gt=0, le=600, description="the CPU seconds a routine's YAML may take to read and check"
    )
    manifest_check_s: float = Field(
        default=5.0, gt=0, le=600, description="the CPU seconds a pack manifest's publish checks may take"
    )
    first_party_namespaces: str = Field(
        default="",
        description="namespaces besides io.b3os whose packs may publish js actions, comma-separated",
    )
    registry_page_size: int = Field(default=100, ge=1, le=1000, description="versions per node feed page")
    temporal_address: str = Field(default="127.0.0.1:7233", description="the Temporal frontend, host:port")
    temporal_namespace: str = Field(default="default", description="the Temporal namespace of routine runs")
    temporal_task_queue: str = Field(default="b3os-routines", description="the routine workers' task queue")
    temporal_busy_task_queue: str = Field(
        default=BUSY_TASK_QUEUE,
        description="the task queue of runs of organizations with 4 or more in flight, used while a worker "
        "polls it (api.runs.lanes); empty: none",
    )
    temporal_tls: bool = Field(default=False, description="TLS to Temporal with the system's roots")
    temporal_tls_ca_file: Path | None = Field(
        default=None, description="PEM of the CA of Temporal's frontend certificate (turns TLS on)"
    )
    temporal_tls_cert_file: Path | None = Field(default=None, description="the api's client cert, mTLS")
    temporal_tls_key_file: Path | None = Field(default=None, description="that certificate's key (PEM)")
    temporal_tls_server_name: str | None = Field(
        default=None, description="the name Temporal's certificate is checked against"
    )
    auth_failures_per_minute: int = Field(
        default=60, ge=1, description="requests with a bad API key per client address in 60 s before 429s"
    )
    keys_per_hour: int = Field(default=50, ge=1, description="API keys an organization may create in an hour")
    run_starts_per_minute: int = Field(
        default=60, ge=1, description="runs one organization may start in 60 s (replays of a key excepted)"
    )
    run_timeout_s: int = Field(
        default=24 * 3600,
        ge=60,
        description="the longest a run may last (its Temporal execution timeout; its grant expires with it)",
    )
    schedule_jitter_s: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="a schedule's runs start up to this many seconds after their time (Temporal's jitter, "
        "the same for a schedule and a time), so that the schedules of one minute do not all start at once",
    )
    runs_per_org: int = Field(
        default=20, ge=1, description="runs of one organization running at once; more are refused (429)"
    )
    egress_url: str | None = Field(default=None, description="the egress proxy's base URL (B3OS_EGRESS_URL)")
    egress_token: str | None = Field(
        default=None, description="the bearer token the api presents to the egress proxy (B3OS_EGRESS_TOKEN)"
    )
    egress_public_key: str | None = Field(
        default=None,
        description="the egress proxy's X25519 public key, base64 raw (default: asked from egress_url)",
    )

    @field_validator("node_networks")
    @classmethod
    def _networks(cls, value: str) -> str:
        parse_networks(value)
        return value

    @field_validator("database_url")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        return None if value is None else checked_database_url(value, "B3OS_DATABASE_URL")

    @model_validator(mode="after")
    def _database_blobs_are_small(self) -> Settings:
        if self.blob_store == "database" and self.max_blob_bytes > DATABASE_MAX_BYTES:
            raise ValueError(
                f"max_blob_bytes is {self.max_blob_bytes}, more than the {DATABASE_MAX_BYTES} bytes the "
                "database blob store takes: lower B3OS_MAX_BLOB_BYTES or use B3OS_BLOB_STORE=filesystem"
            )
        return self

    def node_network_list(self) -> list[IPNetwork]:
        """The networks a node's URL may be on (B3OS_NODE_NETWORKS)."""
        return parse_networks(self.node_networks)

    def resolved_database_url(self) -> str:
        """The database URL: B3OS_DATABASE_URL, then DATABASE_URL, then SQLite under data_dir."""
        if self.database_url:
            return self.database_url
        env = os.environ.get("DATABASE_URL")
        if env:
            return checked_database_url(env, "DATABASE_URL")
        return f"sqlite:///{(self.data_dir / 'b3os.db').resolve()}"

    def resolved_blob_dir(self) -> Path:
        """The blob directory: B3OS_BLOB_DIR or data_dir/blobs."""
        return (self.blob_dir or self.data_dir / "blobs").resolve()


async def get_settings(request: Request) -> Settings:
    """The settings the running app was built with (a dependency)."""
    settings: Settings = request.app.state.settings
    return settings


def checked_database_url(url: str, name: str) -> str:
    """`url` when it names a database b3os runs on: a SQLite file or PostgreSQL.

    Raises:
        ValueError: naming the setting `name` and the URL (its password hidden): not a SQLAlchemy URL,
            another database, or an in-memory SQLite (which the api's connections cannot share).
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(
            f"{name} is not a database URL: write sqlite:////var/lib/b3os/b3os.db or "
            "postgresql://user:password@host/database"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ValueError(f"{name} {shown!r} names a {backend} database: b3os runs on SQLite or PostgreSQL")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError(
            f"{name} {shown!r} names an in-memory SQLite database, which the api's connections and "
            "processes cannot share: name a file, such as sqlite:////var/lib/b3os/b3os.db"
        )
    return url
