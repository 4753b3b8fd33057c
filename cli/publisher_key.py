"""Register the Ed25519 public key that signs a namespace's packs (POST /v1/actions/publishers/NS/keys).

`add NAMESPACE --kid KID` reads the public key `b3os keys generate --kid KID` wrote to the key directory
(<kid>.pub), or `--public-key FILE` (the base64 of its 32 raw bytes, as in a .pub file). The namespace
must be your organization's (`b3os publisher add`), and the key needs `actions:tools:publish` (by name:
`*` does not grant it). Registering the same key again is a no-op; a kid names one key forever.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="register a kid's public key for NAMESPACE")
    add.add_argument("namespace", metavar="NAMESPACE", help="your organization's namespace")
    add.add_argument(
        "--kid", required=True, help='the key id "<namespace>#<name>", such as com.example.tools#dev'
    )
    add.add_argument(
        "--public-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="a file holding the base64 public key (default: <kid>.pub in the key directory)",
    )
    add.add_argument(
        "--keys-dir", type=Path, default=None, help="key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys)"
    )
    add_api_arguments(add)


def public_key(kid: str, file: Path | None, keys_dir: Path | None) -> str:
    """The base64 public key of `kid`: `file`'s text, else the key directory's <kid>.pub.

    Raises:
        CliError: the file cannot be read; the sentence names it.
    """
    from cli._http import CliError
    from packs.errors import PackError
    from packs.signing import load_public_key_b64

    if file is None:
        try:
            return load_public_key_b64(kid, keys_dir)
        except PackError as exc:
            raise CliError(str(exc)) from exc
    try:
        return file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the public key file {file}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        key = public_key(args.kid, args.public_key, args.keys_dir)
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            added = client.actions.add_signing_key(args.namespace, args.kid, key)
    except CliError as exc:
        print(f"b3os publisher key {args.action}: {exc}", file=sys.stderr)
        return 1
    print(f"kid {added['kid']} registered for {added['namespace']}: packs signed with it can be published")
    return 0
