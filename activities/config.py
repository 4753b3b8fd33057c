"""The routine worker's settings for its activities (env prefix `B3OS_`).

`B3OS_WORKER_TOKEN` lives only in the worker's process: it is sent as a header by the activity and
never enters an activity input, a result or workflow history. Alone it calls nothing: each call also
sends the run's grant, which the api minted when it started the run (api.runs.grants).
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ActivitySettings(BaseSettings):
    """Where the step activity sends calls, and with which token."""

    model_config = SettingsConfigDict(env_prefix="B3OS_", extra="ignore", hide_input_in_errors=True)

    api_url: str = Field(default="http://127.0.0.1:8000", description="base URL of the b3os api")
    worker_token: SecretStr = Field(default=SecretStr(""), description="the api's worker token")
    heartbeat_interval_s: float = Field(default=1.0, gt=0, le=30)
