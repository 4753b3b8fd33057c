"""Give a namespace to an organization in the publisher list, by default your own (PUT /v1/admin/publishers).

Needs a key of the operator organization (the one `b3os admin init` made first) with `admin:publishers`
(`*` grants it), from --api-key, B3OS_API_KEY or .b3os/dev.env. Then register the key that signs the
namespace's packs: `b3os publisher key add NAMESPACE --kid KID`.
"""

from __future__ import annotations

import argparse
import sys

from cli._args import add_api_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("namespace", metavar="NAMESPACE", help="reverse DNS, such as com.example.tools")
    parser.add_argument(
        "--org", default=None, metavar="ORG_ID", help="the organization to give it to (default: your own)"
    )
    add_api_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from cli._http import ApiConfig, CliError, api

    try:
        with api(ApiConfig.load(url=args.api_url, key=args.api_key)) as client:
            added = client.actions.add_publisher(args.namespace, org_id=args.org)
    except CliError as exc:
        print(f"b3os publisher add: {exc}", file=sys.stderr)
        return 1
    print(f"publisher {added['namespace']} is organization {added['org_id']}'s")
    print(f"next: b3os publisher key add {added['namespace']} --kid {added['namespace']}#<name>")
    return 0
