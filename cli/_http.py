"""How the CLI reaches the api: where it is, which key, and the SDK's errors as sentences.

The api URL and key come from the flags, else B3OS_API_URL / B3OS_API_KEY, else `.b3os/dev.env`
(written by `b3os dev`), else the URL defaults to http://127.0.0.1:8700. Commands talk to the api
through the SDK (`b3os.B3OS`, which retries 429 and 503 after exactly their Retry-After with the same
Idempotency-Key); an error becomes `CliError` carrying the server's sentence and its status and code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from b3os import B3OS, B3OSError, ConnectionFailed

DEFAULT_URL = "http://127.0.0.1:8700"
DEV_ENV = Path(".b3os") / "dev.env"


class CliError(Exception):
    """The root of the CLI's errors: a failure to report as one sentence on stderr (never a traceback).
    `cli.stack.StackError` (a part of the embedded stack failed to start) is one."""


def read_env_file(path: Path) -> dict[str, str]:
    """The KEY=VALUE settings of a dotenv file (`export`, quotes and # comments allowed, no `${VAR}`
    expansion; a name with no `=` is left out); {} when absent."""
    values = dotenv_values(path, interpolate=False, encoding="utf-8")
    return {name: value for name, value in values.items() if value is not None}


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


def connect(config: ApiConfig, **options: Any) -> B3OS:
    """The SDK client of the api `config` names (`options` go to `B3OS`, such as `max_retries`).

    Raises:
        CliError: no key was found.
    """
    if not config.key:
        raise CliError("No API key: set B3OS_API_KEY (or start `b3os dev`, which writes .b3os/dev.env).")
    try:
        return B3OS(config.url, config.key, **options)
    except B3OSError as exc:
        raise CliError(sentence(exc)) from exc


@contextmanager
def api(config: ApiConfig, **options: Any) -> Iterator[B3OS]:
    """`connect(config)` for the length of a block whose SDK errors leave as `CliError` sentences."""
    client = connect(config, **options)
    with client, as_cli_errors():
        yield client


@contextmanager
def as_cli_errors() -> Iterator[None]:
    """Turn the SDK's errors raised in the block into `CliError` with the CLI's sentence."""
    try:
        yield
    except B3OSError as exc:
        raise CliError(sentence(exc)) from exc


def sentence(exc: B3OSError) -> str:
    """The CLI's sentence for an SDK error: the api's sentence with its status and code, or why the api
    could not be reached."""
    if isinstance(exc, ConnectionFailed) and exc.cause.startswith("Connect"):
        return f"Cannot reach the api at {exc.url} ({exc.cause}): is it running (b3os dev)?"
    return str(exc)
