"""Show the whole thing once: start the embedded stack, run examples/routines/hello.yaml, stop (`make run`).

Builds the node's base template when it is missing (`b3os node build-base`, about a minute, once),
starts Temporal, the api, a node and the routine worker on 127.0.0.1 as `b3os dev` does (same flags,
same .b3os/ state, the example tools published), runs the routine through the runs API, prints each
step as it finishes, the outputs and the Temporal UI page of the run, then stops the stack. Exits 0
when the run succeeded, 1 when it failed or the stack could not start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli._embedded import REPO

if TYPE_CHECKING:
    from b3os import B3OS
    from cli.stack import Stack

HELLO = REPO / "examples" / "routines" / "hello.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cli.stack_options import add_stack_arguments

    add_stack_arguments(parser)
    parser.add_argument("--routine", type=Path, default=HELLO, help="the routine to run (default hello.yaml)")


def ensure_base() -> bool:
    """Build the base template when it is missing; False (said on stderr) when that failed."""
    from node.config import Settings as NodeSettings
    from node.template import TemplateError, build_base, is_built

    base_dir = NodeSettings().base_dir
    if is_built(base_dir):
        return True
    print(f"building the node's base template in {base_dir} (once, about a minute)...", flush=True)
    started = time.monotonic()
    try:
        build_base(base_dir)
    except TemplateError as exc:
        print(f"b3os demo: the base template: {exc}", file=sys.stderr)
        return False
    print(f"base template built in {time.monotonic() - started:.0f} s", flush=True)
    return True


def run(args: argparse.Namespace) -> int:
    from cli._embedded import start_embedded
    from cli._http import ApiConfig, CliError, api
    from cli.stack import Stack, StackError
    from cli.stack_options import options_from_args
    from engine.validate import RoutineError, load_routine_file

    try:
        routine = load_routine_file(str(args.routine))
    except RoutineError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if not ensure_base():
        return 1
    stack = Stack(args.data_dir.resolve() / "logs")
    stack.install_signal_handlers()
    started = time.monotonic()
    final: dict[str, Any] = {"status": "not started"}
    try:
        emb = start_embedded(stack, options_from_args(args), say=lambda line: print(line, flush=True))
        print(f"stack ready in {time.monotonic() - started:.1f} s; published {', '.join(emb.pins)}")
        with api(ApiConfig(url=emb.api_url, key=emb.api_key)) as client:
            final = run_routine(client, routine.name, Path(args.routine).read_text(encoding="utf-8"), stack)
        print(f"Temporal UI: {emb.workflow_url(final['workflow_id'])}")
    except (CliError, StackError) as exc:
        print(f"b3os demo: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
    print(f"stack stopped; logs in {stack.log_dir}")
    return 0 if final["status"] == "succeeded" else 1


def run_routine(client: B3OS, name: str, source: str, stack: Stack) -> dict[str, Any]:
    """Store and run the routine, print each step as it finishes and the outputs; the final run.

    Raises:
        B3OSError: the api refused or could not be reached.
        StackError: Ctrl-C or SIGTERM arrived (the run is cancelled first).
    """
    from b3os import Conflict
    from b3os.runs import newly_finished
    from cli.routine_run import POLL_S, step_line
    from cli.stack import StackError

    client.routines.put(source)
    run_id = client.routines.run(name, {})["run_id"]
    print(f"run {run_id} of {name} started", flush=True)
    shown: set[str] = set()
    while True:  # runs.wait, but stopping when the stack is asked to stop
        asked = time.monotonic()
        current = client.runs.get(run_id, wait_s=POLL_S)
        for step_id, step in newly_finished(current, shown):
            print(step_line(step_id, step), flush=True)
        if current["status"] != "running":
            break
        if stack.stop_requested:
            with contextlib.suppress(Conflict):  # it had ended
                client.runs.cancel(run_id)
            raise StackError(f"stopped: run {run_id} cancelled")
        time.sleep(max(0.0, asked + POLL_S - time.monotonic()))
    if current["status"] == "succeeded":
        print("outputs:")
        print(json.dumps(current["outputs"], indent=2, ensure_ascii=False))
    else:
        err = current.get("error") or {}
        detail = f": {err.get('code')}: {err.get('message')}" if err else ""
        print(f"run {run_id} {current['status']}{detail}", file=sys.stderr)
    return current
