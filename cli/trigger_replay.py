"""Run a delivery's event again, as a new run: a new pending delivery of the same event.

Prints the new delivery's id; `b3os trigger deliveries SUBSCRIPTION` shows its run once it started.
"""

from __future__ import annotations

import argparse
import sys

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "subscription", metavar="SUBSCRIPTION", help="the subscription's id (b3os trigger list)"
    )
    parser.add_argument("delivery", metavar="DELIVERY", help="the delivery's id (b3os trigger deliveries)")
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            row = client.triggers.replay(args.subscription, args.delivery)
    except CliError as exc:
        print(f"b3os trigger replay: {exc}", file=sys.stderr)
        return 1
    print(f"replaying {args.delivery} as {row['id']} (event {row.get('event_id') or '-'}): {row['status']}")
    return 0
