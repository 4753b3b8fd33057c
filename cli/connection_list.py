"""List your organization's connections: id, pack, connection, kind, hint, the hosts its secret is sent to
and when last set.

Secrets are never shown (the api cannot read them back); the hint is the last 4 characters of a
secret of at least 12. `--json` prints the api's answer, {"items": [...]}.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, api

COLUMNS = (
    ("id", "ID"),
    ("pack", "PACK"),
    ("connection", "CONNECTION"),
    ("kind", "KIND"),
    ("hint", "HINT"),
    ("hosts", "SENT TO"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def _cell(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value or "")


def render(items: list[dict[str, Any]]) -> str:
    """The connections as a table, one line each, or a sentence when there are none."""
    if not items:
        return "no connections (add one with b3os connection add PACK CONNECTION --secret-stdin)"
    rows = [
        [_cell(item.get(key)) for key, _ in COLUMNS] + [str(item.get("updated_at", ""))] for item in items
    ]
    header = [title for _, title in COLUMNS] + ["UPDATED"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def run(args: argparse.Namespace) -> int:
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            items = client.connections.list()
    except CliError as exc:
        print(f"b3os connection list: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"items": items}, indent=2) if args.json else render(items))
    return 0
