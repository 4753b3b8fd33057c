"""When a part of the embedded stack that died is started again, and the line that says so.

`b3os dev` keeps its parts up: a part that exits (any exit: a crash, SIGKILL, even exit code 0) is
restarted after a delay that starts at 0.5 s and doubles up to 10 s; a part that then runs 30 s is
healthy again and its next restart waits 0.5 s. A part that died 5 times within a minute is said to
keep failing, and is retried every 10 s for as long as the stack runs: one part never takes the others
down. `Restarts` is that policy for one part (pure: the caller gives the clock); `restart_line` is the
sentence on stderr.
"""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0
HEALTHY_AFTER_S = 30.0
FLAPPING_DEATHS = 5
FLAPPING_WINDOW_S = 60.0


@dataclass
class Restarts:
    """The restart policy of one part: its next delay, how often it died lately, how often it restarted."""

    count: int = 0
    delay_s: float = FIRST_DELAY_S
    deaths: deque[float] = field(default_factory=deque)

    def died(self, *, now: float, ran_s: float) -> float:
        """Record a death at `now` of a run that lasted `ran_s`; return the delay before the restart."""
        if ran_s >= HEALTHY_AFTER_S:
            self.delay_s = FIRST_DELAY_S
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > FLAPPING_WINDOW_S:
            self.deaths.popleft()
        delay = MAX_DELAY_S if self.flapping else self.delay_s
        self.delay_s = min(delay * 2, MAX_DELAY_S)
        self.count += 1
        return delay

    @property
    def flapping(self) -> bool:
        """Whether the part died FLAPPING_DEATHS times within the last FLAPPING_WINDOW_S."""
        return len(self.deaths) >= FLAPPING_DEATHS


def exit_text(code: int) -> str:
    """A Popen return code in words: `code 1`, or `signal 9, SIGKILL` (a negative code)."""
    if code >= 0:
        return f"code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    return f"signal {-code}, {name}"


def restart_line(name: str, code: int, restarts: Restarts, delay_s: float, log_path: Path) -> str:
    """The stderr line for a part that died, e.g.
    `b3os dev: node exited (signal 9, SIGKILL); restarting in 0.5 s (restart 1)`."""
    line = (
        f"b3os dev: {name} exited ({exit_text(code)}); restarting in {delay_s:g} s (restart {restarts.count})"
    )
    if restarts.flapping:
        line += (
            f"; it died {len(restarts.deaths)} times within a minute and is retried every "
            f"{MAX_DELAY_S:g} s: see {log_path}"
        )
    return line
