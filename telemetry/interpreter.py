"""The interpreter's lock handed over often in the api and routine worker processes.

Each of them runs an event loop beside threads that hold the lock for long stretches: the api's starts
made ready in worker threads (a 600 KB input encoded), the worker's workflow tasks (an expression
evaluated for up to its bound). A thread that waits for the lock
gets it when the holder blocks, or after the switch interval has passed. At CPython's 5 ms, the event
loop, which needs the lock again after every wait on a socket, waited up to 5 ms each time behind a
busy thread: one organization's heavy runs made another's one-step run 2.3-3.5x slower than alone; at
1 ms, 1.8-2.5x (docs/performance.md, round 8). A busy thread pays one more hand-over per millisecond.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the interpreter's lock while another waits for it (CPython's default: 5 ms)."""


def hand_over_often() -> None:
    """Set this process's switch interval to `SWITCH_INTERVAL_S`."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
