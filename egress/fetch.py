"""One outbound exchange: checks, credentials, the request over TLS, redirects, a bounded response.

Every hop (the first request and each redirect) must be https to a host of the request's `egress`
list, and connects only to public addresses (egress.guard). Credentials go on a hop only when its
host matches their sealed `hosts`. Responses are read streaming and cut off at `max_body_bytes`
(after decompression: the proxy asks for `gzip, deflate` and decodes them). The whole exchange,
redirects and token refreshes included, is bounded by `timeout_ms`.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
import zlib
from typing import Any

import httpcore
import httpx
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from egress.credentials import Credential, check_conflicts, inject, open_credential, strip_injected
from egress.errors import EgressError
from egress.models import FetchRequest
from egress.oauth2 import TokenRefresher, public_url
from packs.manifest import host_allowed

REDIRECTS = (301, 302, 303, 307, 308)
# Never forwarded as given: hop-by-hop headers, and the ones the proxy sets itself.
DROPPED_REQUEST_HEADERS = frozenset(
    "connection keep-alive proxy-authenticate proxy-authorization proxy-connection te trailer "
    "transfer-encoding upgrade host content-length accept-encoding".split()
)
HOP_BY_HOP = frozenset("connection keep-alive proxy-connection te trailer transfer-encoding upgrade".split())


class _Decoder:
    """Bounded streaming gzip/deflate decoding (a small compressed body cannot blow up past the limit)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        """Decode `data`, giving back at most room + 1 bytes (one more than room means: too large)."""
        try:
            out = self._zlib.decompress(data, room + 1)
        except zlib.error:
            if self.encoding != "deflate" or self._started:
                raise
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some servers send it
            out = self._zlib.decompress(data, room + 1)
        self._started = True
        return out


class Exchange:
    """The state of one fetch: its credentials, whether bytes went out, where a failure happened."""

    def __init__(self, pool: httpcore.AsyncConnectionPool, refresher: TokenRefresher, request: FetchRequest):
        self.pool = pool
        self.refresher = refresher
        self.request = request
        self.credentials: list[Credential] = []
        self.sent = False
        self.redirects = 0
        self.upstream_s = 0.0
        self._phase = "connect"

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.started":
            self._phase = "connect"
        elif event == "connection.start_tls.started":
            self._phase = "tls"
        elif event.endswith(".send_request_headers.started"):
            self._phase, self.sent = "send", True

    def _check(self, url: httpx.URL, previous: httpx.URL | None) -> None:
        via = f" (a redirect from {previous.host})" if previous is not None else ""
        if url.userinfo:
            raise EgressError("bad_request", f"the URL {public_url(url)}{via} carries user info")
        if url.scheme != "https":
            refused = f"{url.scheme}://{url.host}{via} is refused: the proxy only fetches https URLs"
            raise EgressError("egress_refused", refused)
        host = url.raw_host.decode("ascii")
        if not host:
            raise EgressError("bad_request", f"the URL {public_url(url)}{via} has no host")
        if not host_allowed(host, [p.lower() for p in self.request.egress]):
            raise EgressError("egress_refused", f"{host}{via} is not in the action's egress list")

    async def run(self) -> dict[str, Any]:
        """Follow the request through its redirects; the success answer (without `refreshed`)."""
        request = self.request
        try:
            url = httpx.URL(request.url)
        except (httpx.InvalidURL, TypeError):
            raise EgressError("bad_request", "the url is not a valid URL") from None
        self._check(url, None)
        check_conflicts(request.headers, url, self.credentials)
        method, body = request.method, request.body
        connection = {
            token.strip().lower()
            for n, v in request.headers
            if n.lower() == "connection"
            for token in v.split(",")
        }
        headers = [
            (n, v)
            for n, v in request.headers
            if n.lower() not in DROPPED_REQUEST_HEADERS and n.lower() not in connection
        ]
        retried, previous = False, None
        while True:
            self._check(url, previous)
            url = strip_injected(url, self.credentials)
            for credential in self.credentials:
                if credential.applies_to(url.raw_host.decode("ascii")):
                    await self.refresher.ensure_fresh(credential)
            sent_headers, wire_url, carried = inject(headers, url, self.credentials)
            oauth = [c for c in carried if c.payload.kind == "oauth2"]
            retry_401 = bool(oauth) and not retried
            status, response_headers, content = await self._send(
                method, wire_url, url, sent_headers, body, retry_401=retry_401
            )
            if status == 401 and retry_401:
                retried = True
                values = {n: v for n, v in sent_headers if n == "authorization"}
                for credential in oauth:
                    await self.refresher.after_unauthorized(credential, values.get("authorization", ""))
                continue
            location = next((v for n, v in response_headers if n == "location"), None)
            if status not in REDIRECTS or location is None:
                return {
                    "status": status,
                    "headers": [[n, v] for n, v in response_headers],
                    "body": base64.b64encode(content or b"").decode(),
                    "url": str(url.copy_with(fragment=None)),
                    "redirects": self.redirects,
                    "sent": True,
                }
            if self.redirects >= request.max_redirects:
                raise EgressError(
                    "redirects",
                    f"{public_url(url)} redirected more than {request.max_redirects} times",
                    sent=True,
                )
            try:
                previous, url = url, url.join(location)
            except httpx.InvalidURL:
                raise EgressError(
                    "redirects", f"{public_url(url)} redirected to a location that is not a URL", sent=True
                ) from None
            self.redirects += 1
            if status == 303 and method != "HEAD" or status in (301, 302) and method not in ("GET", "HEAD"):
                method, body = "GET", None
                headers = [(n, v) for n, v in headers if n.lower() != "content-type"]

    async def _send(
        self,
        method: str,
        wire: httpx.URL,
        url: httpx.URL,
        headers: list[tuple[str, str]],
        body: bytes | None,
        *,
        retry_401: bool,
    ) -> tuple[int, list[tuple[str, str]], bytes | None]:
        """One request to `wire` (`url` with credentials); its status, headers and body (None when it
        will not be answered: a redirect to follow, or a 401 that will be retried)."""
        target = httpcore.URL(scheme=b"https", host=wire.raw_host, port=wire.port, target=wire.raw_path)
        own = [("Host", wire.netloc.decode("ascii")), ("Accept-Encoding", "gzip, deflate")]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            own.append(("Content-Length", str(len(body or b""))))
        where = public_url(url)
        started = time.perf_counter()
        self._phase = "connect"
        try:
            async with self.pool.stream(
                method.encode(),
                target,
                headers=[(n.encode(), v.encode("latin-1")) for n, v in own + headers],
                content=body,
                extensions={"trace": self._trace},
            ) as response:
                raw_headers = [
                    (n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in response.headers
                ]
                has_location = any(n == "location" for n, _ in raw_headers)
                if response.status in REDIRECTS and has_location or response.status == 401 and retry_401:
                    return response.status, raw_headers, None
                return response.status, *(await self._read(response, raw_headers, where))
        except httpcore.TimeoutException:
            raise TimeoutError from None
        except httpcore.ConnectError as exc:
            if self._phase == "tls":
                why = _ssl_reason(exc)
                raise EgressError("tls", f"the TLS handshake with {url.host} failed: {why}") from None
            raise EgressError("connect", f"could not connect to {url.host}:{url.port or 443}") from None
        except (httpcore.NetworkError, httpcore.ProtocolError):
            raise EgressError("connect", f"the connection to {url.host} broke during {where}") from None
        finally:
            self.upstream_s += time.perf_counter() - started

    async def _read(
        self, response: httpcore.Response, headers: list[tuple[str, str]], where: str
    ) -> tuple[list[tuple[str, str]], bytes]:
        limit = self.request.max_body_bytes
        encoding = next((v.strip().lower() for n, v in headers if n == "content-encoding"), "")
        decoder = _Decoder(encoding) if encoding in ("gzip", "deflate") else None
        body = bytearray()
        too_large = EgressError(
            "body_too_large", f"the response of {where} is larger than {limit} bytes", sent=True
        )
        async for chunk in response.aiter_stream():
            if decoder is not None:
                try:
                    chunk = decoder.feed(chunk, limit - len(body))
                except zlib.error:
                    corrupt = f"the {encoding} body of {where} is corrupt"
                    raise EgressError("connect", corrupt, sent=True) from None
            body += chunk
            if len(body) > limit:
                raise too_large
        dropped = HOP_BY_HOP | ({"content-encoding", "content-length"} if decoder else set())
        return [(n, v) for n, v in headers if n not in dropped], bytes(body)


class Fetcher:
    """Runs fetches for one proxy process: its key, connection pool and token refresher."""

    def __init__(self, pool: httpcore.AsyncConnectionPool, key: X25519PrivateKey, refresher: TokenRefresher):
        """Build the fetcher over a guarded pool (egress.guard) and the proxy's key."""
        self._pool = pool
        self._key = key
        self._refresher = refresher

    async def fetch(self, request: FetchRequest) -> dict[str, Any]:
        """Run one exchange; the answer of `POST /v1/egress/fetch` (success or `error`), never raising."""
        started = time.perf_counter()
        exchange = Exchange(self._pool, self._refresher, request)
        originals: dict[str, str] = {}
        answer: dict[str, Any]
        try:
            ids = [ref.id for ref in request.credentials]
            if len(set(ids)) != len(ids):
                twice = next(i for i in ids if ids.count(i) > 1)
                raise EgressError("bad_request", f"the credential {twice} is given more than once")
            for ref in request.credentials:
                credential = open_credential(self._key, id=ref.id, org_id=ref.org_id, sealed=ref.sealed)
                exchange.credentials.append(credential)
                originals[credential.id] = credential.sealed
            async with asyncio.timeout(request.timeout_ms / 1000):
                answer = await exchange.run()
        except TimeoutError:
            host = _host_of(request.url)
            message = f"the exchange with {host} took longer than {request.timeout_ms} ms"
            answer = {"error": {"reason": "timeout", "message": message, "sent": exchange.sent}}
        except EgressError as exc:
            answer = {"error": {**exc.body(), "sent": exc.sent or exchange.sent}}
        answer["refreshed"] = [
            {"id": c.id, "sealed": c.sealed} for c in exchange.credentials if c.sealed != originals.get(c.id)
        ]
        if "error" not in answer:
            answer["timings"] = {
                "total_ms": round((time.perf_counter() - started) * 1000, 3),
                "upstream_ms": round(exchange.upstream_s * 1000, 3),
            }
        return answer


def _ssl_reason(exc: BaseException) -> str:
    """The TLS library's words for a failed handshake (`certificate verify failed: ...`), or `failed`."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ssl.SSLError):
            verify = getattr(seen, "verify_message", None)
            return f"certificate verify failed: {verify}" if verify else str(seen.reason or "failed")
        seen = seen.__cause__ or seen.__context__
    return "failed"


def _host_of(url: str) -> str:
    try:
        return httpx.URL(url).host or "the upstream"
    except (httpx.InvalidURL, TypeError):
        return "the upstream"
