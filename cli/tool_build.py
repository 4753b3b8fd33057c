"""Build a hosted tool pack: archive tool/, fill tool.bundle.archive, run the publish checks, sign.

The archive is byte-identical for the same files whatever their mtimes, owners or the umask. Every
publish check violation is printed at once. The signed manifest goes back into DIR/b3pack.json and
the archive to DIR/.b3os-build/tool.tar; with --out OUT, a complete signed copy of the pack is
written to OUT instead and DIR is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the pack directory (b3pack.json, tool/, ...)")
    parser.add_argument(
        "--kid", required=True, help='signing key id "<namespace>#<name>" of the pack\'s namespace'
    )
    parser.add_argument("--out", type=Path, default=None, metavar="OUT", help="write the signed pack to OUT")
    parser.add_argument(
        "--keys-dir", type=Path, default=None, help="key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys)"
    )


def run(args: argparse.Namespace) -> int:
    from packs.build import build_tool
    from packs.errors import ChecksFailed, PackError

    try:
        result = build_tool(args.dir, kid=args.kid, keys_dir=args.keys_dir, out_dir=args.out)
    except ChecksFailed as exc:
        print(f"b3os tool build: {args.dir} fails {len(exc.violations)} publish check(s):", file=sys.stderr)
        for v in exc.violations:
            print(f"  {v.message}", file=sys.stderr)
        return 1
    except PackError as exc:
        print(f"b3os tool build: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"b3os tool build: {exc.filename or args.dir}: {exc.strerror}", file=sys.stderr)
        return 1
    archive = result.manifest["tool"]["bundle"]["archive"]
    m = result.manifest
    print(f"built {m['pack']} {m['version']}")
    print(
        f"archive: {result.archive_path} sha256:{archive['sha256']} {archive['bytes']} bytes, "
        f"{archive['entries']} entries, {archive['unpackedBytes']} bytes unpacked"
    )
    print(f"manifest: {result.manifest_path}")
    print(f"hash: {result.hash}")
    print(f"signed by: {m['signature']['kid']}")
    return 0
