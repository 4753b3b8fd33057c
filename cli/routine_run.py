"""Run a routine file through the api: print each step as it finishes, then the outputs.

The file is validated, stored as the organization's routine of its name (POST /v1/routines) and run
(POST /v1/routines/{name}/runs). `--input name=value` values parse as JSON when they can (42, true,
[1,2], {"a":1}), else they are text. `--json` prints one object at the end:
{"run_id", "status", "outputs", "steps": {id: {"status", "attempts", "ref", "output" | "error"}}}
(`ref`: the exact version the step called).
Ctrl-C cancels the run. Exits 0 when the run succeeded, 1 when it failed or was cancelled.
With no --api-url, no B3OS_API_URL and no live stack in .b3os/dev.env, it starts the embedded stack
(as `b3os dev` does) in the background for the length of the command and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

POLL_S = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the routine YAML file")
    parser.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a run input; the value parses as JSON when it can, else it is text; repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end, nothing else")
    parser.add_argument("--api-url", default=None, help="the api (default $B3OS_API_URL or .b3os/dev.env)")
    parser.add_argument("--api-key", default=None, help="the key (default $B3OS_API_KEY or .b3os/dev.env)")


def parse_inputs(pairs: list[str]) -> dict[str, Any]:
    """`name=value` pairs as a dict; values are JSON when they parse, else text.

    Raises:
        ValueError: a pair has no `=` or no name; the sentence names it.
    """
    inputs: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--input {pair!r} is not NAME=VALUE")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        inputs[name.strip()] = value
    return inputs


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiClient, ApiConfig, CliError
    from engine.validate import RoutineError, load_routine_file

    try:
        inputs = parse_inputs(args.input)
    except ValueError as exc:
        print(f"b3os routine run: {exc}", file=sys.stderr)
        return 2
    try:
        routine = load_routine_file(args.file)
    except RoutineError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    with open(args.file, encoding="utf-8") as handle:
        source = handle.read()
    from cli._embedded import stack_for_command

    run_id: str | None = None
    try:
        with (
            stack_for_command(args.api_url) as embedded,
            ApiClient(embedded or ApiConfig.load(url=args.api_url, key=args.api_key)) as api,
        ):
            try:
                api.request("POST", "/v1/routines", json={"yaml": source})
                started = api.request("POST", f"/v1/routines/{routine.name}/runs", json={"inputs": inputs})
                run_id = started.json()["run_id"]
                if not args.json:
                    print(f"run {run_id} of {routine.name} started")
                final = _follow(api, run_id, quiet=args.json)
            except KeyboardInterrupt:
                if run_id is not None:
                    api.request("POST", f"/v1/runs/{run_id}/cancel", accept=(202, 409))
                    print(f"run {run_id} cancelled", file=sys.stderr)
                return 130
    except CliError as exc:
        print(f"b3os routine run: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary(final), indent=2, ensure_ascii=False))
    else:
        if final["status"] == "succeeded":
            print("outputs:")
            print(json.dumps(final["outputs"], indent=2, ensure_ascii=False))
        elif final.get("error"):
            err = final["error"]
            reason = f" ({err['reason']})" if err.get("reason") else ""
            where = f"step {err['step']}: " if err.get("step") else ""
            print(f"run {run_id} failed: {where}{err['code']}{reason}: {err['message']}", file=sys.stderr)
        else:
            print(f"run {run_id} {final['status']}", file=sys.stderr)
    return 0 if final["status"] == "succeeded" else 1


def _follow(api: Any, run_id: str, *, quiet: bool) -> dict[str, Any]:
    """Poll the run until it ends, printing each step once when it finishes."""
    shown: set[str] = set()
    while True:
        run: dict[str, Any] = api.request("GET", f"/v1/runs/{run_id}").json()
        for step_id, step in run["steps"].items():
            if step_id not in shown and step["status"] not in ("pending", "running"):
                shown.add(step_id)
                if not quiet:
                    print(step_line(step_id, step), flush=True)
        if run["status"] != "running":
            return run
        time.sleep(POLL_S)


def step_line(step_id: str, step: dict[str, Any]) -> str:
    """One finished step as a line: status, attempts, and its output or error."""
    status = step["status"]
    if status == "skipped":
        return f"- {step_id}: skipped"
    attempts = step.get("attempts") or 0
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    if status == "succeeded":
        return f"✓ {step_id} ({tries}): {json.dumps(step.get('output'), ensure_ascii=False)}"
    err = step.get("error") or {}
    reason = f" ({err['reason']})" if err.get("reason") else ""
    detail = f": {err.get('code')}{reason}: {err.get('message')}" if err else ""
    return f"✗ {step_id} {status} ({tries}){detail}"


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """The `--json` object: run id, status, outputs, and each step's status, attempts, output or error."""
    steps: dict[str, Any] = {}
    for step_id, step in run["steps"].items():
        entry: dict[str, Any] = {"status": step["status"], "attempts": step.get("attempts", 0)}
        if step.get("ref"):
            entry["ref"] = step["ref"]
        if step.get("error"):
            entry["error"] = step["error"]
        elif step["status"] == "succeeded":
            entry["output"] = step.get("output")
        steps[step_id] = entry
    out: dict[str, Any] = {
        "run_id": run["run_id"],
        "status": run["status"],
        "outputs": run["outputs"],
        "steps": steps,
    }
    if run.get("error"):
        out["error"] = run["error"]
    return out
