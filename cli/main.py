"""The `b3os` command: a thin dispatcher over one module per command.

Each command module defines `add_arguments(parser)` and `run(args) -> int`. Heavy imports stay
inside `run` so that `b3os --help` is fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
from typing import Any

# (group, command) -> module; a group of None is a top-level command.
COMMANDS: dict[tuple[str | None, str], str] = {
    ("keys", "generate"): "cli.keys_generate",
    ("tool", "build"): "cli.tool_build",
    ("tool", "publish"): "cli.tool_publish",
    ("tool", "earnings"): "cli.tool_earnings",
    ("pack", "build"): "cli.pack_build",
    ("pack", "publish"): "cli.pack_publish",
    ("pack", "verify"): "cli.pack_verify",
    ("admin", "init"): "cli.admin_init",
    ("admin", "migrate"): "cli.admin_migrate",
    ("node", "run"): "cli.node_run",
    ("node", "build-base"): "cli.node_build_base",
    ("node", "clean"): "cli.node_clean",
    ("node", "credential"): "cli.node_credential",
    ("egress", "run"): "cli.egress_run",
    ("routine", "validate"): "cli.routine_validate",
    ("routine", "schema"): "cli.routine_schema",
    ("routine", "run"): "cli.routine_run",
    ("routine", "schedule"): "cli.routine_schedule",
    ("routine", "schedules"): "cli.routine_schedules",
    ("run", "show"): "cli.run_show",
    ("run", "rerun"): "cli.run_rerun",
    ("connection", "add"): "cli.connection_add",
    ("connection", "list"): "cli.connection_list",
    ("connection", "remove"): "cli.connection_remove",
    (None, "call"): "cli.call",
    (None, "dev"): "cli.dev",
    (None, "demo"): "cli.demo",
}

GROUP_HELP = {
    "keys": "manage signing keys in the key directory",
    "tool": "build, publish and read earnings of hosted tools",
    "pack": "build, publish and verify packs",
    "admin": "administer a b3os installation",
    "node": "run a node worker, build its base template, clean what dead nodes left, issue node credentials",
    "routine": "validate, describe, run and schedule routines",
    "run": "show and re-run routine runs",
    "egress": "run the egress proxy of declarative actions",
    "connection": "add, list and remove credentials of declarative packs",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="b3os", description="Routines with tool steps.")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    top.required = True
    groups: dict[str, argparse._SubParsersAction] = {}
    for (group, name), module_name in COMMANDS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        if group is None:
            sub = top.add_parser(name, help=_first_line(module.__doc__), description=module.__doc__)
        else:
            if group not in groups:
                gp = top.add_parser(group, help=GROUP_HELP.get(group))
                groups[group] = gp.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
                groups[group].required = True
            sub = groups[group].add_parser(name, help=_first_line(module.__doc__), description=module.__doc__)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def _first_line(doc: str | None) -> str | None:
    return doc.strip().splitlines()[0] if doc else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cli.terminal import safe_streams

    try:
        with safe_streams(), _traced(args):
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


SERVICES = frozenset({("dev", None), ("demo", None), ("node", "run"), ("egress", "run")})
"""Commands that run services (each process traces itself): no span around them."""


def _traced(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """A span around the command when B3OS_OTEL_EXPORTER turns tracing on: the SDK's requests carry
    its `traceparent`, so the api's spans (and a run's workflow, activities and node calls) join it."""
    command = (args.command, getattr(args, "subcommand", None))
    if os.environ.get("B3OS_OTEL_EXPORTER", "none") == "none" or command in SERVICES:
        return contextlib.nullcontext()
    from opentelemetry import trace

    from telemetry import tracing

    tracing.setup("cli")
    name = " ".join(p for p in ("b3os", *command) if p)
    return trace.get_tracer("b3os").start_as_current_span(name, kind=trace.SpanKind.CLIENT)


if __name__ == "__main__":
    sys.exit(main())
