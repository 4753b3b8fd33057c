"""List a trigger subscription's deliveries, newest first: when, status, event id, run, reason.

`status` is refused (the reason says why: a signature that does not hold, a stale timestamp),
duplicate (its event ran before), ignored (no event in it), pending (its run not started yet),
started (the run's id) or failed. `--json` prints the api's answer, {"deliveries": [...]}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments
from cli.trigger_list import table

COLUMNS = ("ID", "RECEIVED", "STATUS", "EVENT", "RUN", "REASON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "subscription", metavar="SUBSCRIPTION", help="the subscription's id (b3os trigger list)"
    )
    parser.add_argument("--limit", type=int, default=100, help="the newest this many (1 to 500; default 100)")
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def render(subscription: str, items: list[dict[str, Any]]) -> str:
    """The deliveries as a table, or a sentence when there are none."""
    if not items:
        return f"subscription {subscription} has no deliveries yet"
    rows = [
        [
            d["id"],
            d["received_at"],
            d["status"],
            d.get("event_id") or "-",
            d.get("run_id") or "-",
            d.get("reason") or d.get("last_error") or "",
        ]
        for d in items
    ]
    return table(COLUMNS, rows)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            items = client.triggers.deliveries(args.subscription, limit=args.limit)
    except CliError as exc:
        print(f"b3os trigger deliveries: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps({"deliveries": items}, indent=2, ensure_ascii=False)
        if args.json
        else render(args.subscription, items)
    )
    return 0
