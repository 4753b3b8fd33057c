"""The C allocator of a long-lived process whose threads come and go: few arenas (`few_arenas()`), and
the memory freed into them given back to the system now and then (`giving_back()`).

glibc's malloc gives each thread that allocates while another holds an arena an arena of its own, up to
eight per core, and an arena keeps what it was freed into as its own, in fragments it rarely gives back.
The api runs its database work on up to 40 worker threads: 1,000 one-step runs at once made its RSS rise
by 3-14 MiB a round of them, round after round, while its Python objects stayed the same (~53,000),
below Python. With two arenas (glibc's `M_ARENA_MAX`, as the `MALLOC_ARENA_MAX` environment variable
would set it) it rose ~2 MiB a round, still with no more Python objects (tracemalloc: the same ~95 MiB
traced after each round). glibc gives back on its own only the free memory at the top of a heap; what
was freed below the top stays in the process until `malloc_trim` gives its pages back. Done every
`GIVE_BACK_EVERY_S`, the api's RSS stayed flat after the first of four rounds of 1,000 runs (207,
210, 210, 210 MiB; docs/performance.md, "Memory").

Set in the process itself, not in each launcher's environment (`b3os dev`, compose, a test's stack,
uvicorn by hand): before its threads allocate. Not glibc (musl has no `mallopt` nor `malloc_trim`):
nothing to do.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
from typing import Any

ARENAS = 2
"""Arenas a process may have: the event loop's and one the worker threads share."""
_M_ARENA_MAX = -8  # glibc's malloc.h
GIVE_BACK_EVERY_S = 10.0
"""How often `giving_back` gives the allocator's free memory back: a trim takes ~1 ms, up to ~20 ms
when a burst has just freed ~200 MiB."""


@functools.cache
def _libc() -> Any:
    """The C library this process runs on."""
    return ctypes.CDLL(None)


def few_arenas() -> bool:
    """Keep this process to `ARENAS` malloc arenas unless `MALLOC_ARENA_MAX` says otherwise; whether set."""
    if "MALLOC_ARENA_MAX" in os.environ:  # an operator's own setting, read by glibc at the start
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_ARENA_MAX, ARENAS))


def give_back() -> bool:
    """Give the pages the allocator holds free, in every arena, back to the system (glibc's
    `malloc_trim(0)`); whether any were given back."""
    trim = getattr(_libc(), "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False


async def giving_back(every_s: float = GIVE_BACK_EVERY_S) -> None:
    """`give_back` every `every_s` seconds, in a worker thread (the loop goes on meanwhile), until
    cancelled."""
    while True:
        await asyncio.sleep(every_s)
        await asyncio.to_thread(give_back)
