"""Remove one of your organization's connections by its id (`b3os connection list` shows the ids).

Calls of actions that need the connection fail from then on, until it is added again.
"""

from __future__ import annotations

import argparse
import sys

from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, api


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the connection's id, conn_...")
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            client.connections.remove(args.id)
    except CliError as exc:
        print(f"b3os connection remove: {exc}", file=sys.stderr)
        return 1
    print(f"removed {args.id}")
    return 0
