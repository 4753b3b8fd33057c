"""List the organization's trigger subscriptions: id, routine, trigger, kind, webhook address.

A webhook subscription's address and signing secret go into the other service's webhook settings;
`--json` prints the api's answer, {"subscriptions": [...]}, the secret included (for a key with
routines:run).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments

COLUMNS = ("ID", "ROUTINE", "TRIGGER", "KIND", "STATE", "ADDRESS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--routine", metavar="NAME", help="only this routine's subscriptions")
    parser.add_argument("--ended", action="store_true", help="list ended subscriptions too")
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    """Rows under their column names, each column as wide as its widest cell."""
    lines = [list(columns), *rows]
    widths = [max(len(row[i]) for row in lines) for i in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    )


def render(items: list[dict[str, Any]]) -> str:
    """The subscriptions as a table, or a sentence when there are none."""
    if not items:
        return "no trigger subscriptions (store a routine with on: [{trigger: ns/pack/key@1}])"
    rows = [
        [
            s["id"],
            s["routine"],
            s["pin"],
            s["kind"],
            "ended" if s.get("ended_at") else "active",
            s.get("hook_url") or "-",
        ]
        for s in items
    ]
    return table(COLUMNS, rows)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            items = client.triggers.subscriptions(args.routine, ended=args.ended)
    except CliError as exc:
        print(f"b3os trigger list: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"subscriptions": items}, indent=2, ensure_ascii=False) if args.json else render(items))
    return 0
