"""Show a run: its routine and version, status, each step (its `name:` and id, status, attempts, output or
error), outputs.

A re-run names the run it re-ran, and a scheduled run its schedule. `--json` prints the run as
`b3os routine run --json` does. Exits 0 when the run succeeded, 1 otherwise (2 while it runs).
"""

from __future__ import annotations

import argparse
import json
import sys

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", help="the run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api
    from cli.routine_run import report, step_line, step_title, summary

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            found = client.runs.get(args.run_id)
    except CliError as exc:
        print(f"b3os run show: {exc}", file=sys.stderr)
        return 1
    if args.json and found["status"] == "running":
        print(json.dumps(summary(found), indent=2, ensure_ascii=False))
        return 2
    if not args.json:
        version = found.get("routine_hash") or f"version {found.get('routine_version')}"
        print(f"run {found['run_id']} of {found['routine']} ({version}): {found['status']}")
        for name, label in (("rerun_of", "a re-run of"), ("schedule_id", "started by schedule")):
            if found.get(name):
                print(f"{label} {found[name]}")
        for step_id, step in (found.get("steps") or {}).items():
            if step.get("status") in ("pending", "running"):
                print(f"… {step_title(step_id, step)}: {step['status']}")
            else:
                print(step_line(step_id, step))
        if found["status"] == "running":
            return 2
    return report(found, as_json=args.json)
