"""Print the most a run of a routine file can cost, per step and in all, in micro-USD.

The file is validated here (its problems printed as `b3os routine validate` prints them), then sent to the
api (`POST /v1/routines/{name}/estimate` with the YAML: checked as a store checks it, not stored), which
pins each `uses:` as a run started now would and prices it with its own unit prices: the ceiling needs the
api's registry and prices, so there is no offline estimate. Each step counts as taken, each call at its
compute for its whole time, its floor and its price, times its attempts (the price once) and its foreach
items: the list's length when the inputs give it, else the input's maxItems, else "unbounded".
`--inputs '{"friends": ["ada"]}'` and `--input NAME=VALUE` (repeatable; the value parses as JSON when it
can) give the run's inputs; `--json` prints the api's answer. Exits 0 (an unbounded ceiling included), 1
when the file has problems or the api refuses it, 2 for bad flags. With no --api-url, no B3OS_API_URL and no
live stack in .b3os/dev.env, it starts the embedded stack for the length of the command, as `b3os routine
run` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the routine YAML file")
    parser.add_argument("--inputs", default=None, metavar="JSON", help="the run's inputs, a JSON object")
    parser.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a run input; the value parses as JSON when it can, else it is text; repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print the api's answer as JSON")
    add_api_arguments(parser)


def inputs_of(text: str | None, pairs: list[str]) -> dict[str, Any]:
    """The inputs of `--inputs JSON` and `--input NAME=VALUE` (these win).

    Raises:
        ValueError: `--inputs` is not a JSON object, or a pair is not NAME=VALUE; the sentence says which.
    """
    from cli.routine_run import parse_inputs

    inputs: dict[str, Any] = {}
    if text is not None:
        try:
            inputs = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--inputs is not JSON: {exc}") from None
        if not isinstance(inputs, dict):
            raise ValueError(f"--inputs must be a JSON object of inputs by name, not {text[:100]!r}")
    return {**inputs, **parse_inputs(pairs)}


def run(args: argparse.Namespace) -> int:
    from cli._embedded import stack_for_command
    from cli._http import ApiConfig, CliError, api
    from cli.routine_run import _problems
    from cli.routine_validate import api_settings
    from engine.validate import RoutineError, load_routine_file

    try:
        inputs = inputs_of(args.inputs, args.input)
    except ValueError as exc:
        print(f"b3os routine cost: {exc}", file=sys.stderr)
        return 2
    try:
        routine = load_routine_file(args.file)
    except RoutineError:
        print("\n".join(_problems(args.file, api_settings(args.api_url, args.api_key))), file=sys.stderr)
        return 1
    with open(args.file, encoding="utf-8") as handle:
        source = handle.read()
    try:
        with (
            stack_for_command(args.api_url) as embedded,
            api(embedded or ApiConfig.load(url=args.api_url, key=args.api_key)) as client,
        ):
            estimate = client.routines.estimate(routine.name, inputs, yaml_text=source)
    except CliError as exc:
        print(f"b3os routine cost: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(estimate, indent=2, ensure_ascii=False) if args.json else "\n".join(lines(estimate)))
    return 0


def lines(estimate: dict[str, Any]) -> list[str]:
    """The estimate as a person reads it: a line per step, then the ceiling in all."""
    rows = [("step", "ref", "calls", "attempts", "attempt", "price", "most")]
    for step in estimate["steps"]:
        call = step["call"]
        items = step["items"]
        calls = "unbounded" if items is None else f"{items:,}"
        if step["items_from"] in ("inputs", "max_items", "literal"):
            calls += f" ({step['items_from'].replace('_', ' ')})"
        most = step["ceiling_microusd"]
        rows.append(
            (
                step["id"],
                step["ref"],
                calls,
                str(step["attempts"]),
                f"{call['compute'] + call['floor']:,}",
                f"{call['price']:,}",
                "unbounded" if most is None else f"{most:,}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = [f"the most a run of {estimate['routine']} can cost, in micro-USD (1 USD = 1,000,000):"]
    for row in rows:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in pairs]
        out.append("  " + "  ".join(cells).rstrip())
    out.append(
        "  (attempt: an attempt's compute for its whole time and its floor; price: once, by the attempt "
        "that succeeds; most: calls x (attempts x attempt + price))"
    )
    for step in estimate["steps"]:
        if step.get("note"):
            out.append(f"  {step['id']}: {step['note']}")
    total = estimate["ceiling_microusd"]
    if total is None:
        out.append(f"in all: unbounded (step {', '.join(estimate['unbounded'])})")
    else:
        out.append(f"in all: at most {total:,} micro-USD ({total // 10**6}.{total % 10**6:06d} USD)")
    return out
