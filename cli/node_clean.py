"""Remove what dead nodes left: their VMs' mounts and directories in run dirs, and their cgroups.

A node stopped with SIGTERM removes its own; one that was killed (SIGKILL, a crash) leaves
`<run dir>/node-<pid>/` (tmpfs and bind mounts) and `b3os-node-<pid>` cgroups. A node starting on the
same run dir removes them; this command does it for any run dir (default B3OS_RUN_DIR) and removes
dead nodes' cgroups wherever they sit. Only what belongs to a pid with no live process is touched.
Needs root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir",
        type=Path,
        action="append",
        default=None,
        help="a run dir to clean (repeatable; default B3OS_RUN_DIR)",
    )


def run(args: argparse.Namespace) -> int:
    from node.config import Settings
    from node.vm.stale import clean_cgroups, dead_node_dirs, remove_node_dir

    run_dirs: list[Path] = args.run_dir or [Settings().run_dir]
    failed = False
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            print(f"b3os node clean: {run_dir} is not a directory", file=sys.stderr)
            failed = True
            continue
        for entry in dead_node_dirs(run_dir):
            count = remove_node_dir(entry)
            print(f"removed {entry} ({count} mounts)")
    for line in clean_cgroups():
        print(f"removed cgroup {line}" if "NOT removed" not in line else f"cgroup {line}")
        failed = failed or "NOT removed" in line
    return 1 if failed else 0
