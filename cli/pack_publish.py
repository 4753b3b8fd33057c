"""Publish a built pack: upload its bundle files the registry lacks, publish it, print each action's pin.

DIR is a pack directory built with `b3os pack build DIR --kid KID` (or `b3os tool build`): the signed
b3pack.json, and for a tool pack .b3os-build/tool.tar. Each bundle file (the archive, NOTICES.md,
fixtures/**) is uploaded (PUT /v1/actions/registry/blobs/sha256:<hex>) only when HEAD says the registry
does not have it; then POST /v1/actions/packs publishes the version, and the exact pin of each action is
printed, one a line. A declarative pack needs a key with actions:write; a tool pack also needs
actions:tools:publish (by name). The key comes from B3OS_API_KEY or .b3os/dev.env. A pack of a namespace
that is not your organization's, or signed with a kid not registered for it, is refused with the command
that sets it up (`b3os publisher add`, `b3os publisher key add`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from b3os import B3OS, Forbidden
from cli._args import add_api_arguments
from cli._http import ApiConfig, CliError, api, as_cli_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the built pack directory")
    add_api_arguments(parser)


def publish_dir(client: B3OS, root: Path, *, say: Any = print) -> dict[str, Any]:
    """Upload the missing files of a built pack and publish it; returns the registry's answer.

    Raises:
        CliError: the pack cannot be read, or the api refused (its sentence).
    """
    from packs.errors import PackError
    from packs.hashing import BundleFile
    from packs.loader import load_built_bundle

    try:
        manifest, files = load_built_bundle(root)
    except PackError as exc:
        raise CliError(str(exc)) from exc
    records = []
    with as_cli_errors():
        for path, data in sorted(files.items()):
            record = BundleFile.of(path, data)
            records.append(record.to_dict())
            if client.actions.has_blob(record.sha256):
                say(f"{path}: already in the registry")
                continue
            client.actions.upload_blob(data)
            say(f"{path}: uploaded {record.bytes} bytes")
        try:
            return client.actions.publish(manifest, records)
        except Forbidden as exc:
            hint = publisher_hint(exc, manifest)
            if hint is None:
                raise
            raise CliError(f"{hint} ({exc.status} {exc.code})") from exc


def publisher_hint(refused: Forbidden, manifest: dict[str, Any]) -> str | None:
    """The sentence of a publish refused for want of the namespace or of its kid, naming the command that
    sets it up (the api's own names the endpoint); None for any other refusal."""
    pack = manifest.get("pack")
    namespace = pack.partition("/")[0] if isinstance(pack, str) else "NAMESPACE"
    signature = manifest.get("signature")
    kid = signature.get("kid") if isinstance(signature, dict) else None
    reason = refused.body.get("reason")
    if reason == "namespace":
        return (
            f"The namespace {namespace} is not your organization's in the publisher list: an operator gives "
            f"it to your organization with `b3os publisher add {namespace} --org <your organization id>` "
            f"(or `b3os publisher add {namespace}` with a key of the operator organization)"
        )
    if reason == "kid_unknown" and isinstance(kid, str):
        return (
            f"The kid {kid[:300]} is not registered for the namespace {namespace}: register its public key "
            f"with `b3os publisher key add {namespace} --kid {kid[:300]}`"
        )
    return None


def publish_command(args: argparse.Namespace, command: str, *, client: B3OS | None = None) -> int:
    """Publish `args.dir` for `command`: print `published <pack>@<version> (<hash>)` and each pin.

    Args:
        args: `dir`, and `api_url` and `api_key` unless `client` is given.
        command: the command's name in error sentences ("b3os pack publish").
        client: the SDK client to use (tests); by default one from `args` and the environment.

    Returns:
        The exit status: 0 when published, 1 with the refusal's sentence on stderr.
    """
    try:
        if client is not None:
            answer = publish_dir(client, args.dir)
        else:
            with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as own:
                answer = publish_dir(own, args.dir)
    except CliError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    print(f"published {answer['pack']}@{answer['version']} ({answer['content_hash']})")
    for action in answer.get("actions", []):
        print(action["ref"])
    return 0


def run(args: argparse.Namespace) -> int:
    return publish_command(args, "b3os pack publish")
