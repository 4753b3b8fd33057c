"""`AsyncB3OS`: the asynchronous client of the b3os api (the same methods as `B3OS`, awaited).

```python
from b3os import AsyncB3OS

async with AsyncB3OS() as b3os:  # B3OS_API_URL and B3OS_API_KEY
    answer = await b3os.actions.call("io.b3os/open-meteo/search-places@1", {"name": "Berlin"})
```
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from b3os import _endpoints as endpoints
from b3os._wire import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT_S,
    DEFAULT_TIMEOUT,
    UNSET,
    ApiRequest,
    Done,
    Options,
    Retry,
    changed,
    connection_failed,
    http_arguments,
    judge,
    make_options,
    tls_for,
)
from b3os.actions import AsyncActions
from b3os.connections import AsyncConnections
from b3os.routines import AsyncRoutines
from b3os.runs import AsyncRuns
from b3os.triggers import AsyncTriggers


class AsyncB3OS:
    """An asynchronous client of one api with one key.

    Attributes:
        actions: The registry, resolving refs, calling actions, publishing, earnings.
        routines: Storing routines and starting runs.
        runs: Reading, waiting for, cancelling and listing runs.
        connections: The organization's credentials for packs' connections.
    """

    def __init__(
        self,
        api_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = UNSET,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait_s: float = DEFAULT_MAX_RETRY_WAIT_S,
        on_retry: Callable[[Retry], Any] | None = None,
        http_client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """Make a client.

        Args:
            api_url: The api's base URL (default `B3OS_API_URL`).
            api_key: The API key, `b3_...` (default `B3OS_API_KEY`).
            timeout: Seconds (or an `httpx.Timeout`) for each request; default 300 s, 10 s to connect
                (with `http_client`: that client's own, unless given).
            max_retries: How many times one request is sent again after a 429 or 503 (or a 409
                `idempotency_in_progress`); 0 turns retries off.
            max_retry_wait_s: The longest `Retry-After` waited; a longer one is raised at once.
            on_retry: Called with a `Retry` before each wait (to log it or show it).
            http_client: An `httpx.AsyncClient` to send with (its transport, proxies, TLS); the client
                does not close it. Default: one of its own.
            sleep: The function that waits `Retry-After` seconds (default `asyncio.sleep`).

        Raises:
            ConfigError: no URL or key was given or set.
        """
        options = make_options(
            api_url,
            api_key,
            timeout=None if http_client is None or timeout is UNSET else timeout,
            max_retries=max_retries,
            max_retry_wait_s=max_retry_wait_s,
            on_retry=on_retry,
        )
        http = http_client or httpx.AsyncClient(
            timeout=DEFAULT_TIMEOUT if timeout is UNSET else timeout, verify=tls_for(options.api_url)
        )
        self._setup(options, http, owns_http=http_client is None, sleep=sleep)

    def _setup(
        self,
        options: Options,
        http: httpx.AsyncClient,
        *,
        owns_http: bool,
        sleep: Callable[[float], Awaitable[Any]],
    ) -> None:
        self._options = options
        self._http = http
        self._owns_http = owns_http
        self._sleep = sleep
        self.actions = AsyncActions(self._send)
        self.routines = AsyncRoutines(self._send)
        self.runs = AsyncRuns(self._send)
        self.connections = AsyncConnections(self._send)
        self.triggers = AsyncTriggers(self._send)

    @property
    def api_url(self) -> str:
        """The api's base URL."""
        return self._options.api_url

    def with_options(
        self,
        *,
        timeout: float | httpx.Timeout = UNSET,
        max_retries: int = UNSET,
        max_retry_wait_s: float = UNSET,
        on_retry: Callable[[Retry], Any] | None = UNSET,
        sleep: Callable[[float], Awaitable[Any]] = UNSET,
    ) -> AsyncB3OS:
        """A client like this one (same api, key and connection pool) with some settings changed."""
        copy = AsyncB3OS.__new__(AsyncB3OS)
        copy._setup(
            changed(
                self._options,
                timeout=timeout,
                max_retries=max_retries,
                max_retry_wait_s=max_retry_wait_s,
                on_retry=on_retry,
            ),
            self._http,
            owns_http=False,
            sleep=self._sleep if sleep is UNSET else sleep,
        )
        return copy

    async def usage(self, month: str | None = None) -> dict[str, Any]:
        """As `B3OS.usage`."""
        answer: dict[str, Any] = await self._send(endpoints.usage(month))
        return answer

    async def aclose(self) -> None:
        """Close the connection pool (not one given as `http_client`)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncB3OS:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncB3OS(api_url={self._options.api_url!r})"

    async def _send(self, request: ApiRequest) -> Any:
        """Send a request until it is answered for good: its value, or its typed error."""
        retries = 0
        while True:
            try:
                response = await self._http.request(**http_arguments(self._options, request))
            except httpx.TransportError as exc:
                raise connection_failed(self._options, request, exc) from exc
            verdict = judge(self._options, request, response, retries)
            if isinstance(verdict, Done):
                return verdict.value
            if self._options.on_retry is not None:
                self._options.on_retry(verdict)
            await self._sleep(verdict.wait_s)
            retries += 1
