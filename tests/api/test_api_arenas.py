"""The api process keeps to two C allocator arenas however many threads it runs (telemetry/arenas.py),
unless the operator's MALLOC_ARENA_MAX says otherwise. Counted by glibc's own `malloc_info`, in a fresh
process that builds the app and then holds 8 threads that each allocated. And what a burst freed below
the top of the allocator's heap goes back to the system, as the api's lifespan does every
`GIVE_BACK_EVERY_S`: seen in the process's RSS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

COUNT_ARENAS = """
import ctypes, sys, threading
from pathlib import Path
from api.config import Settings
from api.main import create_app

create_app(Settings(data_dir=Path(sys.argv[1])))
held, all_in = [], threading.Barrier(9)

def allocate() -> None:
    held.append(bytearray(100_000))  # from malloc: over pymalloc's sizes, under mmap's threshold
    all_in.wait()

threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
all_in.wait()  # 8 threads alive, each with what it allocated
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
out = ctypes.c_void_p(libc.fopen(sys.argv[2].encode(), b"w"))
libc.malloc_info(0, out)
libc.fclose(out)
print(Path(sys.argv[2]).read_text().count("<heap nr="))
for thread in threads:
    thread.join()
"""


def _arenas(tmp_path: Path, **env: str) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", COUNT_ARENAS, str(tmp_path / "state"), str(tmp_path / "malloc.xml")],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_the_api_process_keeps_two_arenas_with_eight_threads(tmp_path: Path) -> None:
    assert _arenas(tmp_path) == 2


def test_an_operators_malloc_arena_max_is_left_to_glibc(tmp_path: Path) -> None:
    assert _arenas(tmp_path, MALLOC_ARENA_MAX="5") == 5


GIVE_BACK = """
import asyncio, sys
from telemetry import arenas

def rss_mib() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

arenas.few_arenas()
burst = [bytes(1000) + i.to_bytes(4, "little") for i in range(200_000)]  # ~200 MiB from malloc
kept = burst[::100]  # what the burst leaves alive, scattered through the heap
del burst
freed = rss_mib()

async def main() -> None:
    trimming = asyncio.create_task(arenas.giving_back(every_s=0.05))
    await asyncio.sleep(1)
    trimming.cancel()

asyncio.run(main())
print(freed, rss_mib(), len(kept))
"""


def test_memory_a_burst_freed_goes_back_to_the_system(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", GIVE_BACK], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    freed, after, _ = (float(v) for v in done.stdout.split())
    assert freed > 150, f"the freed burst was still the process's: {freed} MiB"
    assert after < freed - 100, f"{freed:.0f} MiB before it was given back, {after:.0f} after"
