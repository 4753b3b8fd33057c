"""Add your organization's credential for a pack's connection; the secret is read from stdin only.

PACK is `ns/name` and CONNECTION the key of one of the connections its newest version declares. The
secret never comes from the command line, where the shell history and the process list would keep
it: pass --secret-stdin and pipe it in (at a terminal it is asked for without echo). A basic
connection takes `username:password` or {"username", "password"}, an oauth2 connection a JSON object
{"access_token", "refresh_token"?, "expires_at"?, "token_url"?, "client_id"?, "client_secret"?}, the
others the text (one trailing newline is stripped). `--param NAME=VALUE` (repeatable) and
`--params-json` set the connection's non-secret params; a value parses as JSON unless the params
schema says text. Adding a connection you already have replaces its secret and params.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from b3os import B3OS
from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, api


class _NeverInArgv(argparse.Action):
    """Refuse a secret given on the command line, without repeating it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> NoReturn:
        parser.error(
            f"{option_string} is not an option: a secret is never taken from the command line; "
            "pipe it in with --secret-stdin"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pack", metavar="PACK", help="the pack, such as io.b3os/open-meteo")
    parser.add_argument("connection", metavar="CONNECTION", help="the key of one of the pack's connections")
    parser.add_argument(
        "--secret-stdin", action="store_true", required=True, help="read the secret from stdin (required)"
    )
    for flag in ("--secret", "--password", "--token"):
        parser.add_argument(flag, nargs="?", action=_NeverInArgv, help=argparse.SUPPRESS)
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a non-secret param; the value parses as JSON unless the schema says text; repeatable",
    )
    parser.add_argument("--params-json", default=None, metavar="JSON", help="the params as a JSON object")
    add_api_arguments(parser)


def parse_secret(kind: str, text: str) -> str | dict[str, Any]:
    """The secret of a connection of `kind` from what stdin gave.

    Raises:
        CliError: the text has not the shape the kind takes (the sentence never repeats it).
    """
    text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not text:
        raise CliError(
            'stdin gave no secret: pipe it in, e.g. `printf %s "$TOKEN" | b3os connection add ...`'
        )
    if kind in ("basic", "oauth2") and text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            raise CliError(f"the {kind} secret on stdin starts like JSON but is not valid JSON") from None
        if not isinstance(value, dict):
            raise CliError(f"the {kind} secret on stdin must be a JSON object")
        return value
    if kind == "oauth2":
        raise CliError(
            'an oauth2 secret is a JSON object on stdin: {"access_token": ..., "refresh_token": ...}'
        )
    if kind == "basic":
        username, sep, password = text.partition(":")
        if not sep:
            raise CliError('a basic secret is `username:password` or {"username", "password"} on stdin')
        return {"username": username, "password": password}
    return text


def build_params(params_json: str | None, pairs: list[str], schema: dict[str, Any] | None) -> dict[str, Any]:
    """The params from --params-json, then each --param (which wins).

    Raises:
        CliError: the JSON or a pair is malformed; the sentence says which.
    """
    params: dict[str, Any] = {}
    if params_json is not None:
        try:
            params = json.loads(params_json)
        except ValueError as exc:
            raise CliError(f"--params-json is not valid JSON: {exc}") from None
        if not isinstance(params, dict):
            raise CliError(f"--params-json must be a JSON object, not {type(params).__name__}")
    properties = (schema or {}).get("properties") or {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--param {pair!r} is not NAME=VALUE")
        name = name.strip()
        prop = properties.get(name)
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind == "string" or (isinstance(kind, list) and kind == ["string"]):
            params[name] = raw
            continue
        try:
            params[name] = json.loads(raw)
        except ValueError:
            params[name] = raw
    return params


def declared_connection(client: B3OS, pack: str, key: str) -> dict[str, Any]:
    """The connection `key` as the newest version of `pack` declares it.

    Raises:
        CliError: PACK is not ns/name, or its newest version declares no such connection.
        NotFound: the pack is not in the registry (an SDK error: `api()` makes it a sentence).
    """
    namespace, sep, name = pack.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise CliError(f"PACK {pack!r} is not ns/name, such as io.b3os/open-meteo")
    version = client.actions.get_pack(namespace, name)["version"]
    manifest = client.actions.get_pack_manifest(namespace, name, version)
    declared = [c for c in manifest.get("connections") or [] if isinstance(c, dict)]
    found = next((c for c in declared if c.get("key") == key), None)
    if found is None:
        keys = ", ".join(str(c.get("key")) for c in declared) or "none"
        raise CliError(f"{pack} {version} has no connection {key!r} (its connections: {keys})")
    return found


def read_stdin(stdin: TextIO) -> str:
    """Everything on stdin; at a terminal, one line asked for without echo."""
    if stdin.isatty():
        return getpass.getpass("secret (not shown): ", stream=sys.stderr)
    return stdin.read()


def run(args: argparse.Namespace) -> int:
    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            definition = declared_connection(client, args.pack, args.connection)
            kind = str(definition.get("kind"))
            params = build_params(args.params_json, args.param, definition.get("params"))
            secret = parse_secret(kind, read_stdin(sys.stdin))
            added = client.connections.add(args.pack, args.connection, secret, params)
    except CliError as exc:
        print(f"b3os connection add: {exc}", file=sys.stderr)
        return 1
    hint = f", …{added['hint']}" if added.get("hint") else ""
    print(f"added {added['id']} {added['pack']} {added['connection']} ({added['kind']}{hint})")
    print(f"its secret is sent only to: {', '.join(added.get('hosts') or []) or 'no host'}")
    return 0
