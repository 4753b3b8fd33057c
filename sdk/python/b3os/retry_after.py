"""The one `Retry-After` parser: delay-seconds or an HTTP date, as seconds to wait.

The api sends whole seconds on every 429 and 503; upstreams and proxies may send an HTTP date
(RFC 9110, section 10.2.3). The SDK, the CLI and the other parts of b3os read the header here.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import time


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` value.

    Args:
        value: The header's value: delay-seconds (`"2"`, also `"1.5"`) or an HTTP date
            (`"Wed, 21 Oct 2026 07:28:00 GMT"`).
        now: The current Unix time for an HTTP date (default: the clock).

    Returns:
        The delay in seconds, never negative (a date in the past is 0.0), or None when the value is
        absent, empty or neither a finite number nor a date.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": HTTP dates are GMT
        when = when.replace(tzinfo=dt.UTC)
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)
