"""List the schedules of a stored routine: id, cron, timezone, overlap, paused, next run, inputs.

`declared` schedules come from the routine file's `on: schedule` (replaced each time it is stored).
`--json` prints the api's answer, {"schedules": [...]}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments

COLUMNS = ("ID", "CRON", "TIMEZONE", "OVERLAP", "STATE", "FROM", "NEXT", "INPUTS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the stored routine")
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def render(name: str, items: list[dict[str, Any]]) -> str:
    """The schedules as a table, or a sentence when there are none."""
    if not items:
        return f"routine {name} has no schedules (add one with b3os routine schedule {name} --cron '...')"
    rows = [
        [
            s["id"],
            s["cron"],
            s["timezone"],
            s["overlap"],
            "paused" if s["paused"] else "active",
            "file" if s["declared"] else "api",
            (s.get("next_runs") or ["-"])[0],
            json.dumps(s.get("inputs") or {}, ensure_ascii=False),
        ]
        for s in items
    ]
    widths = [max(len(row[i]) for row in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(COLUMNS), *rows]
    )


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            items = client.routines.schedules(args.name)
    except CliError as exc:
        print(f"b3os routine schedules: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps({"schedules": items}, indent=2, ensure_ascii=False)
        if args.json
        else render(args.name, items)
    )
    return 0
