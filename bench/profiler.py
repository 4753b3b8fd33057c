"""py-spy profiles of running processes: collapsed stacks recorded until stopped, and their hottest frames
(`bench goals --profile`, `bench step_calls --profile`)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def _idle(frames: list[str]) -> bool:
    """A sample of an idle event loop or of a worker thread waiting for work."""
    if any("select" in f and "selectors" in f for f in frames[-2:]) or "epoll" in frames[-1]:
        return True
    return frames[-1].startswith(("Condition.wait (threading", "wait (threading"))


class Profiler:
    """py-spy record of some processes, collapsed stacks, until stopped."""

    def __init__(self, out_dir: Path, pids: dict[str, int], label: str, *, native: bool = False) -> None:
        self.out_dir = out_dir
        self.files: dict[str, Path] = {}
        self.procs: list[subprocess.Popen[bytes]] = []
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            path = out_dir / f"{label}-{name}.txt"
            self.files[name] = path
            self.procs.append(
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "500",
                        "--format",
                        "raw",
                        "--threads",
                        "--output",
                        str(path),
                        *(["--native"] if native else ["--nonblocking"]),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            )
        time.sleep(1.0)  # py-spy attaches

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def summary(self, top: int = 12) -> None:
        """Print the frames with the most samples (self and total) of each profile."""
        for name, path in self.files.items():
            if not path.exists():
                print(f"  profile {name}: none written")
                continue
            own: Counter[str] = Counter()
            total: Counter[str] = Counter()
            samples = 0
            for line in path.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit():
                    continue
                n = int(count)
                frames = stack.split(";")
                if _idle(frames):
                    continue
                samples += n
                own[frames[-1]] += n
                for frame in set(frames):
                    total[frame] += n
            print(f"  profile {name} ({samples} busy samples, {path}):")
            for frame, n in total.most_common(top):
                print(f"    {100 * n / max(samples, 1):5.1f}% total  {frame[:150]}")
