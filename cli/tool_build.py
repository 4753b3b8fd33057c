"""Build a hosted tool pack: archive tool/, fill tool.bundle.archive, run the publish checks, sign.

The archive is byte-identical for the same files whatever their mtimes, owners or the umask. Every
publish check violation is printed at once. The signed manifest goes back into DIR/b3pack.json and
the archive to DIR/.b3os-build/tool.tar; with --out OUT, a complete signed copy of the pack is
written to OUT instead and DIR is left as it is. `b3os pack build` builds any pack the same way.
"""

from __future__ import annotations

import argparse
import functools

from cli import pack_build


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pack_build.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from packs.build import build_pack

    return pack_build.build_command(args, "b3os tool build", functools.partial(build_pack, tool=True))
