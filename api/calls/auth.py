"""Who calls an action: an API key, or the routine worker acting for one.

An API key (`Authorization: Bearer b3_...`) calls for itself. The routine worker presents the
worker token (`B3OS_WORKER_TOKEN`) and `X-B3OS-On-Behalf-Of: <api key id>`, the key that started the
run; the call is then limited and metered exactly as if that key had made it. Either way the key
must hold `actions:call` and not be revoked. The lookup uses its own short session, so no database
transaction stays open while the call runs.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from api.calls.service import Caller
from api.db import read_session
from api.deps import bearer_token, current_principal
from api.errors import Forbidden, Unauthorized
from api.models import ApiKey
from api.scopes import ACTIONS_CALL, grants

ON_BEHALF_OF = "X-B3OS-On-Behalf-Of"


def _is_worker_token(expected: str | None, token: str) -> bool:
    return bool(expected) and hmac.compare_digest(token.encode(), str(expected).encode())


def caller_for(request: Request, *, surface: str) -> Caller:
    """The caller of a request to a call surface (a sync dependency body: it runs in a thread).

    Raises:
        Unauthorized: no key, an unknown or revoked key, or a worker request without a valid key id.
        Forbidden: the key lacks `actions:call`.
    """
    token = bearer_token(request)
    worker = _is_worker_token(request.app.state.settings.worker_token, token)
    key_id = (
        current_principal(request).key_id if not worker else request.headers.get(ON_BEHALF_OF, "").strip()
    )
    if worker and not key_id:
        raise Unauthorized(f"The worker token calls on behalf of a key: send {ON_BEHALF_OF}: <api key id>.")
    key: ApiKey | None = None if worker else getattr(request.state, "api_key", None)
    if key is None:
        with read_session(request.app.state.engine) as session:
            key = session.get(ApiKey, key_id)
    if key is None:
        raise Unauthorized(f"{ON_BEHALF_OF} names no API key ({key_id[:60]}).")
    if key.revoked_at is not None:
        raise Unauthorized("This API key was revoked.")
    if not grants(key.scopes, ACTIONS_CALL):
        raise Forbidden(f"This key lacks the scope {ACTIONS_CALL}.", missing_scope=ACTIONS_CALL)
    return Caller(
        org_id=key.org_id,
        key_id=key.id,
        spend_cap_microusd=key.monthly_spend_cap_microusd,
        surface="routine" if worker else surface,
    )
