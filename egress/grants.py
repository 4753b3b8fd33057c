"""Grants: what the api lets one js call reach through the egress proxy, signed for that call only.

A js action's code runs on a node, which holds no egress token and no secret. For each js call the api
signs a grant with a key derived from the egress token it shares with the proxy; the node relays the
call's `fetch` requests with it (`node/js/relay.py`), and the proxy answers them at
`POST /v1/egress/relay` as fetches of exactly that grant's egress list and sealed credentials, until it
expires. So the proxy knows which call, pack and connections each request belongs to, and nothing on the
node can widen them.

```
payload = base64url(the Grant as JSON, keys sorted, no spaces)
grant   = "b3grant-v1." || payload || "." || base64url(HMAC-SHA256(key, "b3grant-v1." || payload))
key     = HMAC-SHA256(egress token, "b3os-egress-grant-v1")
```
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from egress.models import CredentialRef

PREFIX = "b3grant-v1."
MAX_GRANT_CHARS = 256 * 1024


class GrantError(Exception):
    """A grant that is malformed, not signed with this proxy's token, or expired; the message says which."""


class Grant(BaseModel):
    """What one js call may reach."""

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=100)
    pack: str = Field(min_length=1, max_length=200)
    egress: list[str] = Field(max_length=256)
    credentials: list[CredentialRef] = Field(default_factory=list, max_length=32)
    expires_at: float = Field(description="unix seconds")


def _key(token: str) -> bytes:
    return hmac.new(token.encode(), b"b3os-egress-grant-v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_grant(token: str, grant: Grant) -> str:
    """The grant's text, signed with the key derived from `token`."""
    payload = _b64(json.dumps(grant.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode())
    mac = hmac.new(_key(token), (PREFIX + payload).encode(), hashlib.sha256).digest()
    return f"{PREFIX}{payload}.{_b64(mac)}"


def open_grant(token: str, text: str, *, now: float | None = None) -> Grant:
    """The grant `text` carries, checked.

    Raises:
        GrantError: it is malformed, its signature is not this proxy's, or it has expired.
    """
    if not text.startswith(PREFIX) or len(text) > MAX_GRANT_CHARS or text.count(".") != 2:
        raise GrantError("the grant is not a b3grant-v1 token")
    payload, _, mac = text.removeprefix(PREFIX).partition(".")
    try:
        given = _unb64(mac)
        data = json.loads(_unb64(payload))
    except ValueError:
        raise GrantError("the grant is not a b3grant-v1 token") from None
    expected = hmac.new(_key(token), (PREFIX + payload).encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(given, expected):
        raise GrantError("the grant is not signed by this proxy's api")
    try:
        grant = Grant.model_validate(data)
    except ValidationError:
        raise GrantError("the grant's content is not a grant") from None
    if grant.expires_at < (time.time() if now is None else now):
        raise GrantError("the grant has expired: the call it was made for is over")
    return grant
