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

from cli._exits import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED

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
    ("node", "build-guest"): "cli.node_build_guest",
    ("node", "clean"): "cli.node_clean",
    ("node", "credential"): "cli.node_credential",
    ("egress", "run"): "cli.egress_run",
    ("routine", "validate"): "cli.routine_validate",
    ("routine", "test"): "cli.routine_test",
    ("routine", "schema"): "cli.routine_schema",
    ("routine", "run"): "cli.routine_run",
    ("routine", "cost"): "cli.routine_cost",
    ("routine", "schedule"): "cli.routine_schedule",
    ("routine", "schedules"): "cli.routine_schedules",
    ("trigger", "list"): "cli.trigger_list",
    ("trigger", "deliveries"): "cli.trigger_deliveries",
    ("trigger", "replay"): "cli.trigger_replay",
    ("run", "show"): "cli.run_show",
    ("run", "rerun"): "cli.run_rerun",
    ("connection", "add"): "cli.connection_add",
    ("connection", "list"): "cli.connection_list",
    ("connection", "remove"): "cli.connection_remove",
    ("publisher", "add"): "cli.publisher_add",
    ("publisher", "key"): "cli.publisher_key",
    (None, "call"): "cli.call",
    (None, "dev"): "cli.dev",
    (None, "demo"): "cli.demo",
}

GROUP_HELP = {
    "keys": "signing keys in the key directory",
    "tool": "hosted tools",
    "pack": "packs",
    "admin": "a b3os installation",
    "node": "node workers",
    "routine": "routines",
    "run": "routine runs",
    "trigger": "routines' trigger subscriptions and their deliveries",
    "egress": "the egress proxy of declarative actions",
    "connection": "credentials of declarative packs",
    "publisher": "publisher namespaces and their signing keys",
}
"""What each group is about; `b3os --help` adds the group's commands, so it names only commands that exist."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="b3os", description="Routines with tool steps.")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    top.required = True
    groups: dict[str, argparse._SubParsersAction] = {}
    found = {key: name for key, name in COMMANDS.items() if importlib.util.find_spec(name) is not None}
    for (group, name), module_name in found.items():
        module = importlib.import_module(module_name)
        if group is None:
            sub = top.add_parser(name, help=_first_line(module.__doc__), description=module.__doc__)
        else:
            if group not in groups:
                commands = ", ".join(n for g, n in found if g == group)
                gp = top.add_parser(group, help=f"{GROUP_HELP.get(group, group)}: {commands}")
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
            code = int(args._run(args) or 0)
            sys.stdout.flush()  # here, where a reader that went away is a BrokenPipeError caught below
            return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered would fail again when Python exits, with a
    traceback ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a descriptor (a test's capture): nothing to flush
        pass
    finally:
        os.close(devnull)


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
