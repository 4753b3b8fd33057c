"""`B3OS`: the synchronous client of the b3os api.

```python
from b3os import B3OS

b3os = B3OS()  # B3OS_API_URL and B3OS_API_KEY
pack = b3os.actions.get_pack("io.b3os", "open-meteo")
```
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
from b3os.actions import Actions
from b3os.connections import Connections
from b3os.routines import Routines
from b3os.runs import Runs
from b3os.triggers import Triggers


class B3OS:
    """A client of one api with one key.

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
        http_client: httpx.Client | None = None,
        sleep: Callable[[float], Any] = time.sleep,
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
            http_client: An `httpx.Client` to send with (its transport, proxies, TLS); the client
                does not close it. Default: one of its own.
            sleep: The function that waits `Retry-After` seconds (default `time.sleep`).

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
        http = http_client or httpx.Client(
            timeout=DEFAULT_TIMEOUT if timeout is UNSET else timeout, verify=tls_for(options.api_url)
        )
        self._setup(options, http, owns_http=http_client is None, sleep=sleep)

    def _setup(
        self, options: Options, http: httpx.Client, *, owns_http: bool, sleep: Callable[[float], Any]
    ) -> None:
        self._options = options
        self._http = http
        self._owns_http = owns_http
        self._sleep = sleep
        self.actions = Actions(self._send)
        self.routines = Routines(self._send)
        self.runs = Runs(self._send)
        self.connections = Connections(self._send)
        self.triggers = Triggers(self._send)

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
        sleep: Callable[[float], Any] = UNSET,
    ) -> B3OS:
        """A client like this one (same api, key and connection pool) with some settings changed."""
        copy = B3OS.__new__(B3OS)
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

    def usage(self, month: str | None = None) -> dict[str, Any]:
        """The organization's metered units, calls and cost in micro-USD for a month (`YYYY-MM`).

        Args:
            month: The month; default the current one.
        """
        answer: dict[str, Any] = self._send(endpoints.usage(month))
        return answer

    def close(self) -> None:
        """Close the connection pool (not one given as `http_client`)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> B3OS:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"B3OS(api_url={self._options.api_url!r})"

    def _send(self, request: ApiRequest) -> Any:
        """Send a request until it is answered for good: its value, or its typed error."""
        retries = 0
        while True:
            try:
                response = self._http.request(**http_arguments(self._options, request))
            except httpx.TransportError as exc:
                raise connection_failed(self._options, request, exc) from exc
            verdict = judge(self._options, request, response, retries)
            if isinstance(verdict, Done):
                return verdict.value
            if self._options.on_retry is not None:
                self._options.on_retry(verdict)
            self._sleep(verdict.wait_s)
            retries += 1
