"""Re-run an ended run from a step: print each step as it finishes, then the outputs.

A new run of the same routine version, with the same inputs and pins, keeps the steps of the old run
before the point (succeeded or skipped there, and not needing the point; shown `= step (kept ...)`)
without calling them, and runs the point and everything after it. The point is `--from STEP`, or
else the run's first failed step. Prints as `b3os routine run` does (`--json`: one object at the end,
with `rerun_of`). Ctrl-C cancels the new run. Exits 0 when it succeeded, 1 when it failed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", help="the run to re-run")
    parser.add_argument("--from", dest="from_step", metavar="STEP", help="the step to re-run from")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end, nothing else")
    parser.add_argument("--api-url", default=None, help="the api (default $B3OS_API_URL or .b3os/dev.env)")
    parser.add_argument("--api-key", default=None, help="the key (default $B3OS_API_KEY or .b3os/dev.env)")


def run(args: argparse.Namespace) -> int:
    from b3os import Conflict
    from cli._http import ApiConfig, CliError, api
    from cli.routine_run import follow, report

    run_id: str | None = None
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            try:
                started = client.runs.rerun(args.run_id, from_step=args.from_step)
                run_id = started["run_id"]
                if not args.json:
                    print(f"run {run_id} of {started['routine']} started (a re-run of {args.run_id})")
                final = follow(client, run_id, quiet=args.json)
            except KeyboardInterrupt:
                if run_id is not None:
                    with contextlib.suppress(Conflict):
                        client.runs.cancel(run_id)
                    print(f"run {run_id} cancelled", file=sys.stderr)
                return 130
    except CliError as exc:
        print(f"b3os run rerun: {exc}", file=sys.stderr)
        return 1
    return report(final, as_json=args.json)
