"""The egress proxy's one error: a refused or failed exchange, answered as `{"error": {...}}`.

```
EgressError                   reason, message, sent
├── AddressRefused            private_address (raised by the guard at connect time)
└── SealError                 credential (egress.sealing: a key or sealed token that cannot be used)
```

`reason` is one of `REASONS`; `message` is one sentence that names the host or the URL (without
userinfo or query) and never a secret; `sent` says whether any request bytes may have reached an
upstream, so a caller knows whether a retry could repeat a side effect.
"""

from __future__ import annotations

from typing import Any

REASONS = (
    "egress_refused",
    "private_address",
    "connect",
    "tls",
    "timeout",
    "body_too_large",
    "redirects",
    "credential",
    "credential_conflict",
    "bad_request",
    "refresh_failed",
)


class EgressError(Exception):
    """An exchange the proxy refused or could not finish."""

    def __init__(self, reason: str, message: str, *, sent: bool = False) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.sent = sent

    def body(self) -> dict[str, Any]:
        """The `error` object of the answer."""
        return {"reason": self.reason, "message": self.message, "sent": self.sent}


class AddressRefused(EgressError):
    """A host resolved (or was) an address that is not globally routable."""

    def __init__(self, message: str) -> None:
        super().__init__("private_address", message, sent=False)
