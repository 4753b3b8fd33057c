"""Test routines offline: run each case of FILE.test.yaml on the real workflow, steps answered from fixtures.

FILE is a routine (`hello.yaml`, its tests in `hello.test.yaml` beside it) or a test file. Each case runs
the routine on Temporal's time-skipping test server (no api, node, network or credentials) with every
step's call answered by the case's answers or by the fixtures/ of the step's pack, then compares the
run with what the case expects. Packs come from `--packs DIR` (a pack directory or a directory of them;
repeatable), by default examples/packs and examples/tools of the current directory. Exit status: 0 when
every case passed, 1 when one failed or a file could not run, 2 when the packs cannot be used.
Once the tests have run, the process ends at once (the Temporal SDK's threads are not waited for).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="routine files (or their .test.yaml files)")
    parser.add_argument(
        "--packs",
        action="append",
        default=[],
        metavar="DIR",
        help="a pack directory, or a directory of pack directories, that uses: resolve in (repeatable; "
        "default: examples/packs and examples/tools)",
    )
    parser.add_argument("--junit", metavar="PATH", help="also write the results as JUnit XML to PATH")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from engine.offline.packs import LocalPacks, PacksError, pack_directories
    from engine.offline.report import junit_xml, text
    from engine.offline.runner import RunnerError, run_tests

    try:
        packs = LocalPacks(pack_directories(args.packs))
    except PacksError as exc:
        for problem in exc.problems:
            print(f"b3os routine test: {problem}", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(run_tests([Path(f) for f in args.files], packs))
    except RunnerError as exc:
        print(f"b3os routine test: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text(results))
    if args.junit:
        try:
            Path(args.junit).write_text(junit_xml(results), encoding="utf-8")
        except OSError as exc:
            print(f"b3os routine test: cannot write --junit {args.junit}: {exc.strerror}", file=sys.stderr)
            return 2
    code = 0 if all(r.passed for r in results) else 1
    # The Temporal SDK's native threads may still call into Python while the interpreter finalizes, which
    # aborts the process now and then (as engine.worker.run says): end it at once, its output flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
