"""The Python SDK of b3os: `B3OS` and `AsyncB3OS`, their errors, and the one `Retry-After` parser.

```python
from b3os import B3OS

b3os = B3OS()  # B3OS_API_URL and B3OS_API_KEY
pack = b3os.actions.get_pack("io.b3os", "open-meteo")
print(pack["version"], [a["key"] for a in pack["actions"]])
```

The reference is docs/sdk.md.
"""

from b3os._wire import Retry
from b3os.async_client import AsyncB3OS
from b3os.client import B3OS
from b3os.errors import (
    ActionFailed,
    APIError,
    B3OSError,
    ConfigError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    TimedOut,
    Unauthorized,
    Unavailable,
    WaitTimedOut,
)
from b3os.retry_after import retry_after_seconds

__version__ = "0.1.0"

__all__ = [
    "B3OS",
    "APIError",
    "ActionFailed",
    "AsyncB3OS",
    "B3OSError",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "Retry",
    "ServerError",
    "TimedOut",
    "Unauthorized",
    "Unavailable",
    "WaitTimedOut",
    "__version__",
    "retry_after_seconds",
]
