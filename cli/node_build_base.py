"""Build the node's base template (Debian bookworm with python3 and jq) once and cache it.

Runs `debootstrap --variant=minbase --include=python3,jq bookworm` with the mirror of this machine's apt
sources, into a temporary directory that is renamed into place when complete. The cache is B3OS_BASE_DIR
(default ~/.b3os/base). Needs root and the Debian package `debootstrap`; takes about a minute.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-dir", type=Path, default=None, help="the cache directory (default B3OS_BASE_DIR)"
    )
    parser.add_argument("--force", action="store_true", help="build again even when a template is cached")
    parser.add_argument("--mirror", default=None, help="the Debian mirror (default: from the apt sources)")


def run(args: argparse.Namespace) -> int:
    from node.config import Settings
    from node.template import TemplateError, build_base, is_built, rootfs_path

    base_dir: Path = args.base_dir or Settings().base_dir
    if is_built(base_dir) and not args.force:
        print(f"base template already built at {rootfs_path(base_dir)}")
        return 0
    print(f"building the base template under {base_dir} (about a minute)...", file=sys.stderr)
    try:
        path = build_base(base_dir, force=args.force, mirror=args.mirror)
    except TemplateError as exc:
        print(f"b3os node build-base: {exc}", file=sys.stderr)
        return 1
    print(f"base template built at {path}")
    return 0
