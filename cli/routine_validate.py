"""Validate routine files: print each problem as file:line:column: message, or "FILE: ok".

Checks YAML syntax, fields, step ids and order, `${{ }}` expressions and durations. With
B3OS_API_URL and B3OS_API_KEY (from the environment or .b3os/dev.env) it also resolves each `uses:`
in the registry and checks literal `with:` values against the action's inputSchema; `--packs DIR`
does the same against local pack directories, and `--offline` skips both. A routine's test file
(`hello.test.yaml`, see `b3os routine test`) is checked with its routine beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.resolvers import ActionResolver


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


def api_settings(url: str | None = None, key: str | None = None) -> tuple[str, str] | None:
    """(api url, api key) of the registry `uses:` resolve in: the arguments (`b3os routine run`'s flags),
    else the environment, else .b3os/dev.env; None when no URL or no key is set."""
    from cli._http import DEV_ENV, read_env_file

    url, key = url or os.environ.get("B3OS_API_URL"), key or os.environ.get("B3OS_API_KEY")
    if not (url and key):
        env = read_env_file(DEV_ENV)
        url, key = url or env.get("B3OS_API_URL"), key or env.get("B3OS_API_KEY")
    return (url, key) if url and key else None


def problems(name: str, resolver: ActionResolver | None) -> list[str]:
    """Every problem of a routine file as `file:line:column: message` ([] when it has none), each `uses:`
    resolved by `resolver` (None: not resolved). `b3os routine run` reports a file's problems with it too,
    in the registry of the api it runs on, so that both commands give the same list."""
    from engine.validate import RoutineError, load_routine_file

    try:
        load_routine_file(name, resolver)
    except RoutineError as exc:
        return exc.lines()
    return []


def test_file_problems(name: str, resolver: ActionResolver | None) -> list[str]:
    """Every problem of a routine's test file (`hello.test.yaml`, `b3os routine test`) as
    `file:line:column: message`, read with its routine (`hello.yaml` beside it); its answers' outputs are
    held to their actions' outputSchema when `uses:` resolve in local packs (`--packs`)."""
    from pathlib import Path

    from engine.offline.cases import CasesError, load_cases, routine_path_of
    from engine.resolvers import LocalPackResolver, ResolveError
    from engine.validate import RoutineError, load_routine_file

    routine_path = routine_path_of(Path(name))
    try:
        routine = load_routine_file(routine_path, resolver)
    except RoutineError as exc:
        return [f"{name}:1:1: its routine {routine_path} has problems:", *exc.lines()]
    schemas: dict[str, Any] = {}
    if isinstance(resolver, LocalPackResolver):
        for step in routine.steps:
            try:
                schemas[step.id] = resolver.output_schema(step.uses)
            except ResolveError:
                schemas[step.id] = None
    try:
        load_cases(Path(name), routine, schemas)
    except CasesError as exc:
        return exc.lines()
    return []


def run(args: argparse.Namespace) -> int:
    from engine.offline.cases import TEST_SUFFIX
    from engine.resolvers import LocalPackResolver, RegistryResolver, ResolveError

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
            lines = (
                test_file_problems(name, resolver) if name.endswith(TEST_SUFFIX) else problems(name, resolver)
            )
            print("\n".join(lines) if lines else f"{name}: ok")
            failed = failed or bool(lines)
    finally:
        if registry is not None:
            registry.close()
    return 1 if failed else 0
