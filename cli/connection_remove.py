"""Remove one of your organization's connections by its id (`b3os connection list` shows the ids).

Calls of actions that need the connection fail from then on, until it is added again.
"""

from __future__ import annotations

import argparse
import sys

from cli._http import ApiConfig, CliError, api


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the connection's id, conn_...")
    parser.add_argument("--api-url", default=None, help="the api (default $B3OS_API_URL or .b3os/dev.env)")
    parser.add_argument("--api-key", default=None, help="the key (default $B3OS_API_KEY or .b3os/dev.env)")


def run(args: argparse.Namespace) -> int:
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            client.connections.remove(args.id)
    except CliError as exc:
        print(f"b3os connection remove: {exc}", file=sys.stderr)
        return 1
    print(f"removed {args.id}")
    return 0
