"""OAuth2 refresh (the refresh_token grant) of oauth2 credentials, through the guarded pool.

A credential is refreshed before a request when its token expires within `SKEW_S` seconds, and once
after an upstream 401 on a request that carried it. One refresh runs at a time per connection id (an
`asyncio.Lock` each). A proxy-local cache maps (connection id, sha256 of the sealed token that was
refreshed) to the new token, so calls still holding an old token reuse the refreshed one instead of
refreshing again. The new payload is sealed to the proxy's own key with the same binding; the api
stores that token without being able to read it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable
from urllib.parse import urlencode

import httpcore
import httpx
from cachetools import LRUCache
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from egress.credentials import Credential, OAuth2Secret, Payload
from egress.errors import EgressError
from egress.sealing import seal

SKEW_S = 30
_HEADER_SAFE = re.compile(r"^[^\r\n\x00]+$")
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
REFRESHED_KEPT = 4096
"""Refreshed tokens the cache keeps (least recently used first out)."""


def _digest(sealed: str) -> str:
    return hashlib.sha256(sealed.encode()).hexdigest()


def public_url(url: httpx.URL) -> str:
    """`url` as an error message may show it: no userinfo, no query, no fragment."""
    return str(url.copy_with(userinfo=b"", query=None, fragment=None))


class TokenRefresher:
    """Refreshes oauth2 credentials in place; shared by every request of one proxy process."""

    def __init__(
        self,
        pool: httpcore.AsyncConnectionPool,
        key: X25519PrivateKey,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the refresher.

        Args:
            pool: the guarded connection pool the token endpoint is reached through.
            key: the proxy's key; refreshed payloads are sealed to its public half.
            clock: unix seconds now.
        """
        self._pool = pool
        self._public = key.public_key()
        self._cache: LRUCache[tuple[str, str], tuple[str, Payload]] = LRUCache(maxsize=REFRESHED_KEPT)
        self._locks: dict[str, asyncio.Lock] = {}
        self._clock = clock

    def expired(self, credential: Credential) -> bool:
        """Whether an oauth2 credential's token expires within SKEW_S seconds."""
        secret = credential.payload.secret
        if not isinstance(secret, OAuth2Secret):
            return False
        expires_at = secret.expires_at_unix()
        return expires_at is not None and expires_at <= self._clock() + SKEW_S

    async def ensure_fresh(self, credential: Credential) -> None:
        """Refresh an oauth2 credential whose token has expired (or reuse a refresh another call made)."""
        if credential.payload.kind != "oauth2" or not self.expired(credential):
            return
        async with self._lock(credential.id):
            self._follow(credential)
            if self.expired(credential):
                await self._refresh(credential)

    async def after_unauthorized(self, credential: Credential, rejected: str) -> None:
        """Refresh after an upstream 401 to a request that carried `rejected` (its Authorization value)."""
        async with self._lock(credential.id):
            self._follow(credential)
            if credential.value() == rejected:
                await self._refresh(credential)

    def _lock(self, connection_id: str) -> asyncio.Lock:
        return self._locks.setdefault(connection_id, asyncio.Lock())

    def _follow(self, credential: Credential) -> None:
        """Replace the credential by the newest token refreshed from it, if any (each entry read becomes the
        most recently used)."""
        seen: set[str] = set()
        while (entry := self._cache.get((credential.id, _digest(credential.sealed)))) is not None:
            if credential.sealed in seen:  # cannot happen with fresh nonces; never loop anyway
                break
            seen.add(credential.sealed)
            credential.sealed, credential.payload = entry

    async def _refresh(self, credential: Credential) -> None:
        secret = credential.payload.secret
        assert isinstance(secret, OAuth2Secret)
        if not secret.refresh_token or not secret.token_url:
            raise EgressError(
                "refresh_failed",
                f"the oauth2 credential {credential.id} has expired and holds no refresh token and token URL",
            )
        try:
            url = httpx.URL(secret.token_url)
        except httpx.InvalidURL:
            raise EgressError(
                "refresh_failed", f"the token URL of oauth2 credential {credential.id} is not a URL"
            ) from None
        if url.scheme != "https" or not url.host:
            raise EgressError(
                "refresh_failed", f"the token URL of oauth2 credential {credential.id} is not an https URL"
            )
        form = {"grant_type": "refresh_token", "refresh_token": secret.refresh_token}
        if secret.client_id:
            form["client_id"] = secret.client_id
        if secret.client_secret:
            form["client_secret"] = secret.client_secret
        status, body = await self._post(url, urlencode(form).encode(), credential.id)
        where = public_url(url)
        if status != 200:
            raise EgressError(
                "refresh_failed",
                f"the token endpoint {where} answered {status} to the refresh of credential {credential.id}",
            )
        try:
            answer = json.loads(body)
            access_token = answer["access_token"]
            assert isinstance(access_token, str) and access_token and _HEADER_SAFE.match(access_token)
            expires_in = answer.get("expires_in")
            refresh_token = answer.get("refresh_token") or secret.refresh_token
        except (ValueError, KeyError, TypeError, AssertionError, AttributeError):
            raise EgressError(
                "refresh_failed", f"the token endpoint {where} answered no access_token for {credential.id}"
            ) from None
        expires_at = self._clock() + float(expires_in) if isinstance(expires_in, int | float) else None
        new_secret = secret.model_copy(
            update={"access_token": access_token, "refresh_token": refresh_token, "expires_at": expires_at}
        )
        payload = credential.payload.model_copy(update={"secret": new_secret})
        sealed = seal(self._public, payload.model_dump(mode="json"), binding=credential.binding)
        self._cache[(credential.id, _digest(credential.sealed))] = (sealed, payload)
        credential.sealed, credential.payload = sealed, payload

    async def _post(self, url: httpx.URL, form: bytes, connection_id: str) -> tuple[int, bytes]:
        """POST the form to the token endpoint; its status and (bounded) body."""
        target = httpcore.URL(scheme=b"https", host=url.raw_host, port=url.port, target=url.raw_path)
        headers = [
            (b"Host", url.netloc),
            (b"Content-Type", b"application/x-www-form-urlencoded"),
            (b"Accept", b"application/json"),
            (b"Accept-Encoding", b"identity"),
            (b"Content-Length", str(len(form)).encode()),
        ]
        where = public_url(url)
        try:
            async with self._pool.stream(b"POST", target, headers=headers, content=form) as response:
                body = bytearray()
                async for chunk in response.aiter_stream():
                    body += chunk
                    if len(body) > MAX_TOKEN_RESPONSE_BYTES:
                        raise EgressError(
                            "refresh_failed", f"the token endpoint {where} answered more than 64 KiB"
                        )
                return response.status, bytes(body)
        except EgressError as exc:
            if exc.reason == "refresh_failed":
                raise
            raise EgressError(
                "refresh_failed", f"the refresh of credential {connection_id} failed: {exc.message}"
            ) from None
        except httpcore.TimeoutException:
            raise TimeoutError from None
        except httpcore.ConnectError:
            raise EgressError(
                "refresh_failed", f"could not connect to the token endpoint {where} for {connection_id}"
            ) from None
        except httpcore.ProtocolError:
            raise EgressError(
                "refresh_failed", f"the token endpoint {where} broke the connection for {connection_id}"
            ) from None
        except httpcore.NetworkError:
            raise EgressError(
                "refresh_failed", f"the connection to the token endpoint {where} failed for {connection_id}"
            ) from None
