"""Failed authentications, limited per client address: a flood of bad keys is refused cheaply.

Each api process counts, per client address, the requests whose API key was not valid within a sliding
window (`B3OS_AUTH_FAILURES_PER_MINUTE`, default 60 in 60 s). Past it, a request from that address is
refused with `429 rate_limited` (Retry-After: when the oldest failure leaves the window) before its key
is looked up in the database, unless its key is one this process saw valid within the last 10 minutes,
or one shaped like a key the api issues (`b3_` and 40 letters and digits), which is still looked up (one
indexed read): a good key keeps working from an address that also sends bad ones, whether or not this
process has seen it. Keys are held as sha256 digests;
the tables are bounded (the least recently seen addresses and keys are forgotten first).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable

from cachetools import LRUCache

from api.errors import RateLimited

WINDOW_S = 60.0
GOOD_KEY_S = 600.0
MAX_ADDRESSES = 10_000
MAX_GOOD_KEYS = 10_000


class AuthFailuresLimited(RateLimited):
    """429 rate_limited for an address past its failed authentications (metrics: `auth_failures`)."""

    limit_kind = "auth_failures"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class AuthLimiter:
    """Counts failed authentications per client address and refuses a flood (see the module docstring)."""

    def __init__(self, *, failures_per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = failures_per_minute
        self._clock = clock
        self._failures: LRUCache[str, deque[float]] = LRUCache(maxsize=MAX_ADDRESSES)
        self._good: LRUCache[str, float] = LRUCache(maxsize=MAX_GOOD_KEYS)
        self._lock = threading.Lock()  # on PostgreSQL keys are looked up in worker threads

    def refusal(self, address: str, token: str) -> RateLimited | None:
        """The refusal of a request from an address past its failures, unless its key was seen valid
        (None: go on and look the key up)."""
        with self._lock:
            recent = self._recent(address)
            if len(recent) < self._limit:
                return None
            seen = self._good.get(_digest(token))
            if seen is not None and seen > self._clock():
                return None
            wait = recent[0] + WINDOW_S - self._clock()
        return AuthFailuresLimited(
            f"Too many requests with an API key that is not valid came from this address ({len(recent)} in "
            f"{int(WINDOW_S)} s); try again later.",
            retry_after=wait,
        )

    def failed(self, address: str) -> None:
        """Count one failed authentication from an address."""
        with self._lock:
            recent = self._recent(address)
            recent.append(self._clock())
            self._failures[address] = recent  # the least recently seen addresses are forgotten first

    def succeeded(self, token: str) -> None:
        """Remember a valid key for a while, so a flood from its address does not shut it out."""
        with self._lock:
            self._good[_digest(token)] = self._clock() + GOOD_KEY_S  # the least recently seen go first

    def _recent(self, address: str) -> deque[float]:
        recent = self._failures.get(address, deque())
        horizon = self._clock() - WINDOW_S
        while recent and recent[0] <= horizon:
            recent.popleft()
        return recent
