"""Settings of action calls (env prefix `B3OS_`): unit prices, limits, idempotency, node timing.

Kept beside the api's `Settings` (same prefix, same environment) so the call service owns its
knobs; the app holds one instance in `app.state.call_settings`.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.calls.costs import UnitPrices

MIB = 1024 * 1024


class CallSettings(BaseSettings):
    """Limits and prices of hosted tool calls."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore", frozen=True)

    price_vcpu_ms_usd: str = Field(default="0.00000002", description="USD per vCPU-millisecond")
    price_gib_ms_usd: str = Field(default="0.0000000025", description="USD per GiB-millisecond of memory")
    price_tool_call_usd: str = Field(default="0.00001", description="USD per call whose command ran (floor)")
    price_action_call_usd: str = Field(
        default="0.00001", description="USD per HTTP action call whose request was sent (floor)"
    )
    calls_per_org: int = Field(default=4, ge=1, description="tool calls at once per organization")
    http_calls_per_org: int = Field(default=8, ge=1, description="HTTP action calls at once per organization")
    calls_per_node: int = Field(default=8, ge=1, description="calls at once per node")
    routine_admission_wait_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a routine step's call waits in the api for a slot before its 429/503",
    )
    starts_per_minute: int = Field(default=120, ge=1, description="call starts per organization in 60 s")
    routine_burst: int = Field(
        default=20,
        ge=1,
        description="past this many starts of its organization in 60 s, a routine step's call starts at most "
        "one every 60 s / starts_per_minute",
    )
    org_publisher_quota_microusd: int = Field(
        default=20_000_000, ge=0, description="publishers' prices a month"
    )
    max_call_timeout_ms: int = Field(default=60_000, ge=100, description="the longest a call may run")
    default_action_timeout_ms: int = Field(default=30_000, ge=100, description="timeoutMs when absent")
    call_overhead_s: float = Field(default=10.0, gt=0, description="VM start, copy, collect, delete")
    lease_grace_s: float = Field(default=30.0, gt=0, description="after its deadline a lost call frees slots")
    idempotency_ttl_s: int = Field(default=86_400, ge=86_400, description="how long answers are stored")
    max_call_body_bytes: int = Field(default=1 * MIB, ge=1024, description="the call request body limit")
    max_output_bytes: int = Field(default=256 * 1024, description="output files in all, inline")
    node_live_s: float = Field(default=15.0, gt=0, description="a node unheard of longer gets no calls")
    node_heartbeat_s: float = Field(default=3.0, gt=0, description="the nodes' heartbeat and sync period")
    node_bad_s: float = Field(default=300.0, gt=0, description="no calls to an unproven node")

    def unit_prices(self) -> UnitPrices:
        """The parsed unit prices."""
        return UnitPrices.parse(
            vcpu_ms_usd=self.price_vcpu_ms_usd,
            gib_ms_usd=self.price_gib_ms_usd,
            tool_call_usd=self.price_tool_call_usd,
            action_call_usd=self.price_action_call_usd,
        )
