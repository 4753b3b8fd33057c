"""The signing secret of a webhook subscription, derived by the api, never stored.

`secret = "b3whs_" + base64url(HMAC-SHA256(hooks key, subscription id))`: the hooks key is
`B3OS_HOOKS_SECRET`, or else a random key the api writes once to `<data_dir>/hooks-secret` (mode 0600).
The api shows a subscription's secret to its organization (GET /v1/triggers/subscriptions) to paste into
the other service's webhook settings, and verifies each delivery's HMAC with it (api.triggers.verify).
Why the api and not the egress proxy: docs/packs.md, "Where a delivery is verified".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from api.config import Settings

PREFIX = "b3whs_"
FILE = "hooks-secret"


def hooks_key(settings: Settings) -> bytes:
    """The key every subscription's secret is derived from (made once, on first use, when not set)."""
    if settings.hooks_secret:
        return settings.hooks_secret.encode()
    path = Path(settings.data_dir) / FILE
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: that one is the key
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as file:
        file.write(key)
    return key


def subscription_secret(key: bytes, subscription_id: str) -> str:
    """The signing secret of one subscription."""
    digest = hmac.new(key, subscription_id.encode(), hashlib.sha256).digest()
    return PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
