"""Build a pack, with a tool or declarative: run the publish checks and sign it.

A tool pack gets what `b3os tool build` gives it: the archive of tool/ (byte-identical for the same
files), tool.bundle.archive filled, in DIR/.b3os-build/tool.tar. A declarative pack has no archive: its
bundle is NOTICES.md (when present) and fixtures/**. Every publish check violation is printed at once.
The signed manifest goes back into DIR/b3pack.json; with --out OUT, a complete signed copy of the pack
is written to OUT instead and DIR is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packs.build import BuildResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the pack directory (b3pack.json, ...)")
    parser.add_argument(
        "--kid", required=True, help='signing key id "<namespace>#<name>" of the pack\'s namespace'
    )
    parser.add_argument("--out", type=Path, default=None, metavar="OUT", help="write the signed pack to OUT")
    parser.add_argument(
        "--keys-dir", type=Path, default=None, help="key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys)"
    )


def build_command(args: argparse.Namespace, command: str, build: Callable[..., BuildResult]) -> int:
    """Run one build (`build_pack`, of any pack or of tool packs only) for `command`; print the result.

    Returns:
        The exit status: 0 when built, 1 with every violation or the error's sentence on stderr.
    """
    from packs.errors import ChecksFailed, PackError

    try:
        result = build(args.dir, kid=args.kid, keys_dir=args.keys_dir, out_dir=args.out)
    except ChecksFailed as exc:
        print(f"{command}: {args.dir} fails {len(exc.violations)} publish check(s):", file=sys.stderr)
        for v in exc.violations:
            print(f"  {v.message}", file=sys.stderr)
        return 1
    except PackError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{command}: {exc.filename or args.dir}: {exc.strerror}", file=sys.stderr)
        return 1
    m = result.manifest
    print(f"built {m['pack']} {m['version']}")
    if result.archive_path is not None:
        archive = m["tool"]["bundle"]["archive"]
        print(
            f"archive: {result.archive_path} sha256:{archive['sha256']} {archive['bytes']} bytes, "
            f"{archive['entries']} entries, {archive['unpackedBytes']} bytes unpacked"
        )
    print(f"manifest: {result.manifest_path}")
    print(f"hash: {result.hash}")
    print(f"signed by: {m['signature']['kid']}")
    return 0


def run(args: argparse.Namespace) -> int:
    from packs.build import build_pack

    return build_command(args, "b3os pack build", build_pack)
