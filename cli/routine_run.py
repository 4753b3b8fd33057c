"""Run a routine file through the api: print each step as it finishes, then the outputs.

The file is validated, stored as the organization's routine of its name (POST /v1/routines) and run
(POST /v1/routines/{name}/runs). `--input name=value` values parse as JSON when they can (42, true,
[1,2], {"a":1}), else they are text. `--json` prints one object at the end:
{"run_id", "status", "outputs", "steps": {id: {"status", "attempts", "ref", "output" | "error"}}}
(`ref`: the exact version the step called).
A file with problems is not run: each is printed as `b3os routine validate` prints it (the same list,
its `uses:` resolved in the registry of the api the run would use). Ctrl-C cancels the run.
`--max-cost MICRO_USD` starts the run with `max_cost_microusd` (see `b3os routine cost`): a start refused for
it prints the api's sentence and exits 1; a run stopped by it fails at the step named.
Exits 0 when the run succeeded, 1 when the file has problems or the run failed or was cancelled
elsewhere, 130 when Ctrl-C cancelled it (128 + SIGINT, as shells report an interrupted command).
With no --api-url, no B3OS_API_URL and no live stack in .b3os/dev.env, it starts the embedded stack
(as `b3os dev` does) in the background for the length of the command and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cli._args import add_api_arguments

POLL_S = 0.5
"""The longest one read of a running run waits for its end (`GET /v1/runs/{id}?wait_s=`): the end shows
at once, finished steps and retries within half a second (a retry waits at least its 1 s Retry-After, so
each attempt is seen)."""


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
    parser.add_argument(
        "--max-cost",
        type=int,
        default=None,
        metavar="MICRO_USD",
        help="the most the run may cost, in micro-USD: refused before it starts when its ceiling (b3os "
        "routine cost) is above it or unbounded, and stopped at the step whose call could take it past it",
    )
    add_api_arguments(parser)


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


def _problems(name: str, settings: tuple[str, str] | None) -> list[str]:
    """The file's problems as `b3os routine validate` lists them, `uses:` resolved in the api `settings`
    names (None: not resolved, as validate does when no api is set)."""
    from cli.routine_validate import problems
    from engine.resolvers import RegistryResolver

    if settings is None:
        return problems(name, None)
    with RegistryResolver(*settings) as registry:
        return problems(name, registry)


def run(args: argparse.Namespace) -> int:
    from cli._exits import EXIT_INTERRUPTED
    from cli._http import ApiConfig, CliError, api
    from cli.routine_validate import api_settings
    from engine.validate import RoutineError, load_routine_file

    try:
        inputs = parse_inputs(args.input)
    except ValueError as exc:
        print(f"b3os routine run: {exc}", file=sys.stderr)
        return 2
    try:
        routine = load_routine_file(args.file)
    except RoutineError:  # the whole list, `uses:` too, in the api given (none is started to say it)
        print("\n".join(_problems(args.file, api_settings(args.api_url, args.api_key))), file=sys.stderr)
        return 1
    with open(args.file, encoding="utf-8") as handle:
        source = handle.read()
    from cli._embedded import stack_for_command

    try:
        with (
            stack_for_command(args.api_url) as embedded,
            api(config := embedded or ApiConfig.load(url=args.api_url, key=args.api_key)) as client,
        ):
            assert config.key is not None  # api() refused a config without one
            unresolved = _problems(args.file, (config.url, config.key))
            if unresolved:
                print("\n".join(unresolved), file=sys.stderr)
                return 1

            def start() -> dict[str, Any]:
                client.routines.put(source)
                return client.routines.run(routine.name, inputs, max_cost_microusd=args.max_cost)

            final = follow_new_run(
                client, start, lambda run: f"run {run['run_id']} of {routine.name} started", quiet=args.json
            )
    except CliError as exc:
        print(f"b3os routine run: {exc}", file=sys.stderr)
        return 1
    return EXIT_INTERRUPTED if final is None else report(final, as_json=args.json)


def follow_new_run(
    client: Any,
    start: Callable[[], dict[str, Any]],
    started: Callable[[dict[str, Any]], str],
    *,
    quiet: bool,
) -> dict[str, Any] | None:
    """Start a run and follow it to its end (`follow`); Ctrl-C cancels it.

    Used by `b3os run rerun` too. Ctrl-C is taken between two requests, not inside one
    (`ctrl_c_between_requests`): raised inside httpx's connection pool, it could leave the pool's lock
    taken, and the client's next request (the cancel) or its close then waited for it for ever. The
    follow's reads wait at most `POLL_S` at the api, so Ctrl-C is seen within about that; a Ctrl-C during
    the start cancels the run once it has started.

    Args:
        client: the SDK client.
        start: starts the run; the api's answer (with `run_id`).
        started: the line printed once it started (unless `quiet`), from that answer.
        quiet: print nothing while it runs.

    Returns:
        The ended run; None when Ctrl-C cancelled it (said on stderr).
    """
    from b3os import Conflict

    with ctrl_c_between_requests() as interrupted:
        answer = start()
        run_id = answer["run_id"]
        if not quiet:
            print(started(answer), flush=True)  # at once, also into a pipe
        final = follow(client, run_id, quiet=quiet, stop=interrupted)
        if final is not None:
            return final
        with contextlib.suppress(Conflict):  # it had ended
            client.runs.cancel(run_id)
        print(f"run {run_id} cancelled", file=sys.stderr)
        return None


@contextlib.contextmanager
def ctrl_c_between_requests() -> Iterator[threading.Event]:
    """Within the block, Ctrl-C (SIGINT) sets the event rather than raising `KeyboardInterrupt` where the
    program happens to be; a second Ctrl-C raises it at once (a request that does not end). A SIGINT the
    process ignores stays ignored."""
    interrupted = threading.Event()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield interrupted
        return

    def on_ctrl_c(_signum: int, _frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def report(final: dict[str, Any], *, as_json: bool) -> int:
    """Print an ended run as `b3os routine run` does (its outputs, or why it failed); the exit status.

    Used by `b3os run rerun` and `b3os run show` too.
    """
    run_id = final["run_id"]
    if as_json:
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


def _print_step(step_id: str, step: dict[str, Any]) -> None:
    print(step_line(step_id, step), flush=True)


def follow(client: Any, run_id: str, *, quiet: bool, stop: threading.Event) -> dict[str, Any] | None:
    """Poll the run until it ends; print each step once when it finishes, and each retry of a step's call.
    None when `stop` was set before a read (the run may still run).

    (The SDK's `runs.wait` tells of finished steps only; a retry is seen while the step still runs.)
    """
    from b3os.runs import newly_finished

    finished: set[str] = set()
    retries: set[tuple[str, Any, int]] = set()
    while True:
        if stop.is_set():
            return None
        asked = time.monotonic()
        run: dict[str, Any] = client.runs.get(run_id, wait_s=POLL_S)
        if not quiet:
            for step_id, step in (run.get("steps") or {}).items():
                retrying = step.get("retrying")
                seen = (step_id, (retrying or {}).get("item"), (retrying or {}).get("attempt", 0))
                if retrying and step.get("status") == "running" and seen not in retries:
                    retries.add(seen)
                    print(retry_line(step_title(step_id, step), retrying), flush=True)
            for step_id, step in newly_finished(run, finished):
                _print_step(step_id, step)
        if run.get("status") != "running":
            return run
        time.sleep(max(0.0, asked + POLL_S - time.monotonic()))  # an api that did not wait: wait here


def retry_line(step_id: str, retrying: dict[str, Any]) -> str:
    """A step whose call is retried: `… echo: attempt 2 after 429 rate_limited (retry in 2 s)`."""
    item = f"[{retrying['item']}]" if retrying.get("item") is not None else ""
    status = f"{retrying['status']} " if retrying.get("status") else ""
    why = f"{status}{retrying.get('code') or 'a failure'}"
    wait = retrying.get("retry_in_s")
    when = "running" if wait is None else f"retry in {max(1, math.ceil(wait))} s"
    return f"… {step_id}{item}: attempt {retrying.get('attempt')} after {why} ({when})"


def step_title(step_id: str, step: dict[str, Any]) -> str:
    """How a line names a step: `Fetch the weather (weather)` when it has a `name:`, else its id."""
    return f"{step['name']} ({step_id})" if step.get("name") else step_id


def step_line(step_id: str, step: dict[str, Any]) -> str:
    """One finished step as a line: status, attempts, and its output or error (a kept step says so)."""
    status = step["status"]
    step_id = step_title(step_id, step)
    if step.get("reused"):
        kept = "skipped" if status == "skipped" else json.dumps(step.get("output"), ensure_ascii=False)
        return f"= {step_id} (kept from the run re-run, not called): {kept}"
    if status == "skipped":
        return f"- {step_id}: skipped"
    attempts = step.get("attempts") or 0
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    if status == "succeeded" and step.get("output") is None and step.get("output_bytes"):
        size = step["output_bytes"]
        return f"✓ {step_id} ({tries}): an output of {size:,} bytes (in the run once it has ended)"
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
        if step.get("name"):
            entry["name"] = step["name"]
        if step.get("ref"):
            entry["ref"] = step["ref"]
        if step.get("reused"):
            entry["reused"] = True
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
    for name in ("rerun_of", "schedule_id"):
        if run.get(name):
            out[name] = run[name]
    if run.get("error"):
        out["error"] = run["error"]
    return out
