"""The egress proxy's settings: one pydantic-settings model, env prefix `B3OS_EGRESS_`.

`B3OS_EGRESS_TOKEN` (the bearer the api presents) is required. `B3OS_EGRESS_CONNECT_TO` and
`B3OS_EGRESS_CA_FILE` are operator seams (tests use them to reach loopback HTTPS servers under real
host names): the first maps `host:port` to another `address:port` like curl's `--connect-to`, the
second adds a PEM CA to the trusted roots.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# host:port:address:port, each host or address a name, an IPv4 address or a bracketed IPv6 address.
_PLACE = r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]\s]+)"
_ENTRY = re.compile(rf"^{_PLACE}:(\d{{1,5}}):{_PLACE}:(\d{{1,5}})$")

ConnectTo = dict[tuple[str, int], tuple[str, int]]


def parse_connect_to(text: str) -> ConnectTo:
    """Parse `host:port:address:port[,...]` into {(host, port): (address, port)}.

    Host names are lowercased and IPv6 brackets removed.

    Raises:
        ValueError: an entry is malformed; the sentence names it.
    """
    mapping: ConnectTo = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise ValueError(
                f"connect_to entry {entry!r} is not host:port:address:port (an IPv6 address goes in brackets)"
            )
        host, port, address, to_port = match.groups()
        ports = int(port), int(to_port)
        if not all(0 < p < 65536 for p in ports):
            raise ValueError(f"connect_to entry {entry!r} has a port outside 1-65535")
        mapping[(host.strip("[]").lower(), ports[0])] = (address.strip("[]"), ports[1])
    return mapping


class EgressSettings(BaseSettings):
    """Everything the egress proxy reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="B3OS_EGRESS_", extra="ignore", hide_input_in_errors=True)

    token: SecretStr = Field(description="the bearer token the api presents (B3OS_EGRESS_TOKEN); required")
    key_file: Path = Field(
        default=Path("~/.b3os/egress/egress.key"),
        description="the proxy's X25519 private key, PKCS#8 PEM, made (0600) on first start",
    )
    connect_to: str = Field(
        default="", description="host:port:address:port entries, comma-separated, like curl's --connect-to"
    )
    ca_file: Path | None = Field(default=None, description="a PEM CA added to the system and certifi roots")
    host: str = Field(default="127.0.0.1", description="the address to listen on")
    port: int = Field(default=8720, ge=0, le=65535, description="the port to listen on")

    @field_validator("token")
    @classmethod
    def _token_not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("B3OS_EGRESS_TOKEN is empty: the api and the proxy share it")
        return value

    @field_validator("connect_to")
    @classmethod
    def _connect_to_parses(cls, value: str) -> str:
        parse_connect_to(value)
        return value

    @field_validator("ca_file")
    @classmethod
    def _ca_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"ca_file {value} is not a file")
        return value

    def connect_map(self) -> ConnectTo:
        """The parsed `connect_to` entries."""
        return parse_connect_to(self.connect_to)

    def resolved_key_file(self) -> Path:
        """The key file with `~` expanded."""
        return self.key_file.expanduser()
