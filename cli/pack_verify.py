"""Verify a built pack directory: rebuild the archive from tool/, run the publish checks, recompute the
content hash and check the signature; print every mismatch and exit 1 if there is one.

The public key is --public-key (base64 of the raw 32 bytes) or the key store's key of the
signature's kid ($B3OS_KEYS_DIR or ~/.b3os/keys).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the pack directory")
    parser.add_argument(
        "--public-key", default=None, help="the publisher's public key, base64 of 32 raw bytes"
    )
    parser.add_argument(
        "--keys-dir", type=Path, default=None, help="key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys)"
    )


def run(args: argparse.Namespace) -> int:
    from packs.verify import verify_pack_dir

    try:
        report = verify_pack_dir(args.dir, public_key_b64=args.public_key, keys_dir=args.keys_dir)
    except OSError as exc:
        print(f"b3os pack verify: {exc.filename or args.dir}: {exc.strerror}", file=sys.stderr)
        return 1
    if not report.ok:
        print(f"b3os pack verify: {args.dir} does not verify:", file=sys.stderr)
        for problem in report.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"ok: {report.pack} {report.version} {report.hash} signed by {report.kid}")
    return 0
