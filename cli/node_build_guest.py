"""Build the microvm driver's guest (a Debian cloud kernel and an initramfs of the base template) once.

The kernel is the package `linux-image-cloud-amd64` depends on, fetched with `apt-get download` and
unpacked with `dpkg -x` (never installed); the initramfs is the base template (`b3os node build-base`)
less documentation and package management, with the guest's init. Cached under B3OS_GUEST_DIR (default
~/.b3os/guest) by a hash of its inputs: a second run with the same kernel package, base and init does
nothing, and the same inputs give the same bytes. Needs root (the base template is root's) and apt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--guest-dir", type=Path, default=None, help="the cache directory (default B3OS_GUEST_DIR)"
    )
    parser.add_argument("--force", action="store_true", help="build again even when the same guest is cached")
    parser.add_argument("--kernel-deb", type=Path, default=None, help="a kernel package .deb already at hand")


def run(args: argparse.Namespace) -> int:
    from node.config import Settings
    from node.vm.guest import GuestError, build_guest

    settings = Settings()
    guest_dir: Path = args.guest_dir or settings.guest_dir
    if args.kernel_deb is not None and not args.kernel_deb.is_file():
        print(f"b3os node build-guest: --kernel-deb {args.kernel_deb} is not a file", file=sys.stderr)
        return 2
    try:
        guest = build_guest(guest_dir, settings.base_dir, force=args.force, deb=args.kernel_deb)
    except GuestError as exc:
        print(f"b3os node build-guest: {exc}", file=sys.stderr)
        return 1
    print(f"guest {guest.key} ({guest.kernel_package}) at {guest.dir}")
    return 0
