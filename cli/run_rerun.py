"""Re-run an ended run from a step: print each step as it finishes, then the outputs.

A new run of the same routine version, with the same inputs and pins, keeps the steps of the old run
before the point (succeeded or skipped there, and not needing the point; shown `= step (kept ...)`)
without calling them, and runs the point and everything after it. The point is `--from STEP`, or
else the run's first failed step. Prints as `b3os routine run` does (`--json`: one object at the end,
with `rerun_of`). Ctrl-C cancels the new run. Exits 0 when it succeeded, 1 when it failed, 130 when
Ctrl-C cancelled it (128 + SIGINT).
"""

from __future__ import annotations

import argparse
import sys

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", help="the run to re-run")
    parser.add_argument("--from", dest="from_step", metavar="STEP", help="the step to re-run from")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end, nothing else")
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from cli._exits import EXIT_INTERRUPTED
    from cli._http import ApiConfig, CliError, api
    from cli.routine_run import follow_new_run, report

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            final = follow_new_run(
                client,
                lambda: client.runs.rerun(args.run_id, from_step=args.from_step),
                lambda run: f"run {run['run_id']} of {run['routine']} started (a re-run of {args.run_id})",
                quiet=args.json,
            )
    except CliError as exc:
        print(f"b3os run rerun: {exc}", file=sys.stderr)
        return 1
    return EXIT_INTERRUPTED if final is None else report(final, as_json=args.json)
