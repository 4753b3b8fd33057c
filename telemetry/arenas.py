"""Few C allocator arenas in a process whose threads come and go: `few_arenas()`.

glibc's malloc gives each thread that allocates while another holds an arena an arena of its own, up to
eight per core, and an arena keeps what it was freed into as its own, in fragments it rarely gives back.
The api runs its database work on up to 40 worker threads: 1,000 one-step runs at once made its RSS rise
by 3-14 MiB a round of them, round after round, while its Python objects stayed the same (~53,000),
below Python. With two arenas (glibc's `M_ARENA_MAX`, as the `MALLOC_ARENA_MAX` environment variable
would set it) it stays flat after the first round (docs/performance.md, "Memory").

Set in the process itself, not in each launcher's environment (`b3os dev`, compose, a test's stack,
uvicorn by hand): before its threads allocate. Not glibc (musl has no `mallopt`): nothing to do.
"""

from __future__ import annotations

import ctypes
import os

ARENAS = 2
"""Arenas a process may have: the event loop's and one the worker threads share."""
_M_ARENA_MAX = -8  # glibc's malloc.h


def few_arenas() -> bool:
    """Keep this process to `ARENAS` malloc arenas unless `MALLOC_ARENA_MAX` says otherwise; whether set."""
    if "MALLOC_ARENA_MAX" in os.environ:  # an operator's own setting, read by glibc at the start
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library this process runs on
    if mallopt is None:
        return False
    return bool(mallopt(_M_ARENA_MAX, ARENAS))
