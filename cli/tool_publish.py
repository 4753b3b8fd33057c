"""Publish a built hosted tool pack: upload its files when the registry lacks them, then publish it.

DIR is a pack directory built with `b3os tool build DIR --kid KID` (the signed b3pack.json and
.b3os-build/tool.tar). Each bundle file is uploaded (PUT /v1/actions/registry/blobs/sha256:<hex>)
only when HEAD says the registry does not have it; then POST /v1/actions/packs publishes the
version and the exact pin of each action is printed. The key needs actions:tools:publish (by name)
and actions:write; it comes from B3OS_API_KEY or .b3os/dev.env. `b3os pack publish` publishes any pack.
"""

from __future__ import annotations

import argparse

from cli import pack_publish
from cli.pack_publish import publish_dir

__all__ = ["add_arguments", "publish_dir", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pack_publish.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return pack_publish.publish_command(args, "b3os tool publish")
