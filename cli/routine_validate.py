"""Validate routine files: print each problem as file:line:column: message, or "FILE: ok".

Checks YAML syntax, fields, step ids and order, `${{ }}` expressions and durations. With
B3OS_API_URL and B3OS_API_KEY (from the environment or .b3os/dev.env) it also resolves each `uses:`
in the registry and checks literal `with:` values against the action's inputSchema; `--packs DIR`
does the same against local pack directories, and `--offline` skips both.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="routine YAML files")
    parser.add_argument(
        "--packs",
        action="append",
        default=[],
        metavar="DIR",
        help="resolve uses: against this pack directory (holding b3pack.json), not the registry; repeatable",
    )
    parser.add_argument("--offline", action="store_true", help="do not resolve uses: at all")


def api_settings() -> tuple[str, str] | None:
    """(api url, api key) from the environment, else from .b3os/dev.env, else None."""
    from cli._http import DEV_ENV, read_env_file

    url, key = os.environ.get("B3OS_API_URL"), os.environ.get("B3OS_API_KEY")
    if not (url and key):
        env = read_env_file(DEV_ENV)
        url, key = url or env.get("B3OS_API_URL"), key or env.get("B3OS_API_KEY")
    return (url, key) if url and key else None


def run(args: argparse.Namespace) -> int:
    from engine.resolvers import ActionResolver, LocalPackResolver, RegistryResolver, ResolveError
    from engine.validate import RoutineError, load_routine_file

    resolver: ActionResolver | None = None
    registry: RegistryResolver | None = None
    if args.packs and not args.offline:
        try:
            resolver = LocalPackResolver(args.packs)
        except ResolveError as exc:
            print(f"b3os routine validate: {exc}", file=sys.stderr)
            return 2
    elif not args.offline:
        settings = api_settings()
        if settings is not None:
            registry = RegistryResolver(*settings)
            resolver = registry
    failed = False
    try:
        for name in args.files:
            try:
                load_routine_file(name, resolver)
            except RoutineError as exc:
                failed = True
                for line in exc.lines():
                    print(line)
            else:
                print(f"{name}: ok")
    finally:
        if registry is not None:
            registry.close()
    return 1 if failed else 0
