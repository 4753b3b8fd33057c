"""Create an Ed25519 signing key pair in the key directory and print its key id and public key.

The private key is written to $B3OS_KEYS_DIR/<kid>.key (default ~/.b3os/keys) with mode 0600 and is
never printed; the public key (base64 of its raw 32 bytes) goes to <kid>.pub and to stdout. A key
that exists is never overwritten.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kid", required=True, help='key id "<namespace>#<name>", such as com.example.tools#dev-2026-10'
    )
    parser.add_argument(
        "--keys-dir", type=Path, default=None, help="key directory (default $B3OS_KEYS_DIR or ~/.b3os/keys)"
    )


def run(args: argparse.Namespace) -> int:
    from packs.errors import PackError
    from packs.signing import generate_key, keys_dir

    directory = keys_dir(args.keys_dir)
    try:
        public = generate_key(args.kid, directory)
    except PackError as exc:
        print(f"b3os keys generate: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"b3os keys generate: cannot write the key to {directory}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"kid: {args.kid}")
    print(f"public key: {public}")
    return 0
