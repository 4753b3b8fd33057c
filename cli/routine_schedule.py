"""Schedule runs of a stored routine: a Temporal Schedule that starts a run on a cron expression.

`--cron` takes five fields (minute hour day-of-month month day-of-week, such as '0 7 * * 1-5'),
`--timezone` an IANA name (default UTC), `--input name=value` the runs' inputs (JSON when it parses,
else text), `--overlap` what to do when a run is due while the previous one runs (skip, buffer_one,
allow_all). Each run is started for this command's key. Prints the schedule's id (`--json`: the
api's answer).
"""

from __future__ import annotations

import argparse
import json
import sys

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the stored routine")
    parser.add_argument("--cron", required=True, help="five fields, such as '0 7 * * 1-5'")
    parser.add_argument(
        "--timezone", default=None, help="an IANA timezone, such as Europe/Paris (default UTC)"
    )
    parser.add_argument(
        "--input", "-i", action="append", default=[], metavar="NAME=VALUE", help="a run input; repeatable"
    )
    parser.add_argument("--overlap", choices=("skip", "buffer_one", "allow_all"), default=None)
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api
    from cli.routine_run import parse_inputs

    try:
        inputs = parse_inputs(args.input)
    except ValueError as exc:
        print(f"b3os routine schedule: {exc}", file=sys.stderr)
        return 2
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            made = client.routines.schedule(
                args.name, args.cron, timezone=args.timezone, inputs=inputs, overlap=args.overlap
            )
    except CliError as exc:
        print(f"b3os routine schedule: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(made, indent=2, ensure_ascii=False))
    else:
        print(f"schedule {made['id']} of {args.name}: {made['cron']} ({made['timezone']})")
    return 0
