"""The control plane's settings: one pydantic-settings model, env prefix `B3OS_`.

Served through `get_settings` (a FastAPI dependency) so tests build an app with their own `Settings`.
`B3OS_DATABASE_URL` wins over `DATABASE_URL`; without either the database is the SQLite file
`<data_dir>/b3os.db`. Blobs live under `<data_dir>/blobs` unless `B3OS_BLOB_DIR` says otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import Request
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Settings(BaseSettings):
    """Everything the api reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore")

    data_dir: Path = Field(default=Path(".b3os"), description="the state directory of this installation")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default SQLite under data_dir"
    )
    blob_dir: Path | None = Field(default=None, description="where blobs are stored; default data_dir/blobs")
    node_token: str | None = Field(
        default=None, description="the bearer token nodes present (B3OS_NODE_TOKEN)"
    )
    worker_token: str | None = Field(default=None, description="the bearer token routine workers present")
    max_blob_bytes: int = Field(default=64 * MIB, ge=1, description="the largest blob a PUT accepts")
    max_body_bytes: int = Field(default=2 * MIB, ge=1024, description="the largest JSON request body")
    registry_page_size: int = Field(default=100, ge=1, le=1000, description="versions per node feed page")
    temporal_address: str = Field(default="127.0.0.1:7233", description="the Temporal frontend, host:port")
    temporal_namespace: str = Field(default="default", description="the Temporal namespace of routine runs")
    temporal_task_queue: str = Field(default="b3os-routines", description="the routine workers' task queue")
    auth_failures_per_minute: int = Field(
        default=60, ge=1, description="requests with a bad API key per client address in 60 s before 429s"
    )
    keys_per_hour: int = Field(default=50, ge=1, description="API keys an organization may create in an hour")
    run_starts_per_minute: int = Field(
        default=60, ge=1, description="runs one organization may start in 60 s (replays of a key excepted)"
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

    def resolved_database_url(self) -> str:
        """The database URL: B3OS_DATABASE_URL, then DATABASE_URL, then SQLite under data_dir."""
        if self.database_url:
            return self.database_url
        env = os.environ.get("DATABASE_URL")
        if env:
            return env
        return f"sqlite:///{(self.data_dir / 'b3os.db').resolve()}"

    def resolved_blob_dir(self) -> Path:
        """The blob directory: B3OS_BLOB_DIR or data_dir/blobs."""
        return (self.blob_dir or self.data_dir / "blobs").resolve()


def get_settings(request: Request) -> Settings:
    """The settings the running app was built with (a dependency)."""
    settings: Settings = request.app.state.settings
    return settings
