"""Telemetry settings, read from the environment by every b3os process."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class TelemetrySettings(BaseSettings):
    """Traces and the `/metrics` endpoint (env prefix `B3OS_`)."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore", hide_input_in_errors=True)

    otel_exporter: Literal["none", "console", "otlp", "file"] = Field(
        default="none",
        description="Where spans go: none (tracing off), console (stderr), otlp (OTLP over HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT), file (JSON lines appended to B3OS_OTEL_FILE).",
    )
    otel_file: Path | None = Field(default=None, description="The file of the `file` exporter.")
    worker_metrics_address: str = Field(
        default="",
        description="host:port where the routine worker serves the Temporal SDK's Prometheus metrics "
        "(b3os_temporal_*); empty: off.",
    )
    metrics_token: SecretStr = Field(
        default=SecretStr(""),
        description="Bearer token that may read /metrics from anywhere; without it only loopback may.",
    )
