"""Show what a publisher namespace's tools earned in one month: calls, gross, B3OS's cut and net.

Amounts are accrued micro-USD, shown as USD; each day of each tool is one line, and the rate line
says which cut is in force and why. The key must belong to the namespace's organization.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, api


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", required=True, help="the publisher namespace, such as com.example.tools"
    )
    parser.add_argument("--month", default=None, help="YYYY-MM (default: this month)")
    parser.add_argument("--json", action="store_true", help="print the api's JSON answer")
    add_api_arguments(parser)


def usd(microusd: int) -> str:
    """Micro-USD as USD with six decimals: 1_234_500 -> "1.234500"."""
    sign = "-" if microusd < 0 else ""
    whole, frac = divmod(abs(microusd), 10**6)
    return f"{sign}{whole}.{frac:06d}"


def render(report: dict[str, Any]) -> str:
    """The report as a table: a header, the rate line, one line per tool and day, and the month's totals."""
    lines = [
        f"{report['namespace']} earnings for {report['month']} (accrued, USD)",
        f"rate: {report['rate']['reason']}",
        f"{'date':<10}  {'tool':<32}  {'calls':>7}  {'gross':>14}  {'cut':>14}  {'net':>14}",
    ]
    for tool in report["tools"]:
        for day in tool["days"]:
            lines.append(
                f"{day['date']:<10}  {tool['tool']:<32}  {day['calls']:>7}  {usd(day['gross']):>14}  "
                f"{usd(day['cut']):>14}  {usd(day['net']):>14}"
            )
    lines.append(
        f"{'total':<10}  {'':<32}  {report['calls']:>7}  {usd(report['gross']):>14}  "
        f"{usd(report['cut']):>14}  {usd(report['net']):>14}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            report = client.actions.earnings(args.namespace, args.month or None)
    except CliError as exc:
        print(f"b3os tool earnings: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0
