"""The CLI's HTTP client of the api: where it is, which key, errors as sentences, Retry-After honoured.

The api URL and key come from B3OS_API_URL / B3OS_API_KEY, else from `.b3os/dev.env` (written by
`b3os dev`), else the URL defaults to http://127.0.0.1:8700. An error answer becomes `CliError`
carrying the server's sentence; 429 and 503 answers are retried after exactly their Retry-After.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8700"
DEV_ENV = Path(".b3os") / "dev.env"


class CliError(Exception):
    """A failure to report as one sentence on stderr (never a traceback)."""


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a file (blank lines and # comments skipped); {} when absent."""
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class ApiConfig:
    """Where the api is and the key to call it with."""

    url: str
    key: str | None

    @classmethod
    def load(
        cls,
        *,
        url: str | None = None,
        key: str | None = None,
        environ: Mapping[str, str] | None = None,
        dev_env: Path = DEV_ENV,
    ) -> ApiConfig:
        """Flags first, then the environment, then .b3os/dev.env, then the default URL."""
        env = os.environ if environ is None else environ
        dev = read_env_file(dev_env)
        return cls(
            url=(url or env.get("B3OS_API_URL") or dev.get("B3OS_API_URL") or DEFAULT_URL).rstrip("/"),
            key=key or env.get("B3OS_API_KEY") or dev.get("B3OS_API_KEY"),
        )


class ApiClient:
    """A thin client: `request(method, path, ...)` returns the response of an accepted status."""

    def __init__(
        self,
        config: ApiConfig,
        *,
        http: httpx.Client | None = None,
        max_retries: int = 5,
        max_wait_s: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not config.key:
            raise CliError("No API key: set B3OS_API_KEY (or start `b3os dev`, which writes .b3os/dev.env).")
        self.config = config
        self.http = http or httpx.Client(base_url=config.url, timeout=httpx.Timeout(300.0, connect=10.0))
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s
        self.sleep = sleep

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        accept: tuple[int, ...] = (200, 201),
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send a request; statuses in `accept` are returned, 429/503 retried, others raise CliError."""
        headers = {**(headers or {}), "Authorization": f"Bearer {self.config.key}"}
        if content is not None:
            headers["Content-Type"] = "application/octet-stream"
        for attempt in range(self.max_retries + 1):
            try:
                response = self.http.request(method, path, json=json, content=content, headers=headers)
            except httpx.TransportError as exc:
                raise CliError(
                    f"Cannot reach the api at {self.config.url} ({exc.__class__.__name__}): "
                    "is it running (b3os dev)?"
                ) from exc
            if response.status_code in accept:
                return response
            wait = _retry_after(response)
            if wait is not None and attempt < self.max_retries and wait <= self.max_wait_s:
                self.sleep(wait)
                continue
            raise CliError(error_sentence(response))
        raise AssertionError("unreachable")


def _retry_after(response: httpx.Response) -> float | None:
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


def error_sentence(response: httpx.Response) -> str:
    """The server's sentence for an error answer (with its code), or a sentence about the status."""
    try:
        error = response.json().get("error", {})
        message, code = error.get("message"), error.get("code")
    except (ValueError, AttributeError):
        message, code = None, None
    if isinstance(message, str) and message:
        return f"{message} ({response.status_code} {code})" if code else message
    return f"The api answered {response.status_code} {response.reason_phrase}."
