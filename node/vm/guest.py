"""The microVM guest: a Debian cloud kernel and an initramfs, built from Debian packages and cached.

`build_guest(guest_dir, base_dir)` makes `<guest_dir>/<key>/vmlinuz` and `initrd.cpio` and points
`<guest_dir>/current` at them:

- the kernel is `vmlinuz` of the package `linux-image-cloud-amd64` depends on (resolved with `apt-cache`,
  fetched with `apt-get download`, unpacked with `dpkg -x` into a temporary directory: never installed);
- the initramfs is the base template (`b3os node build-base`: bookworm with python3 and jq, what a tool
  gets in the sandbox driver) less documentation, man pages, locales and apt's lists, plus the few virtio
  modules of that kernel the guest needs (listed in dependency order in `/etc/b3os-modules`), a
  `/dev/console` node and `/init` (`node/vm/guest_init.py`).

Reproducible: the archive is a sorted `newc` cpio with inode numbers by position, owners as in the base
and mtimes clamped to the kernel's (`node/vm/cpio.py`), uncompressed (under TCG the kernel unpacks plain
bytes faster than it inflates them). The same kernel package, base template and init give the same bytes.
`key` hashes exactly those inputs (the kernel package's sha256, every base file's path, mode, size and
mtime, the init's source and `FORMAT`): a build whose key is cached does nothing; a new build keeps the
`KEEP` newest older ones and removes the rest (a node that runs one holds its files open). Where apt's lists
are missing or no longer name a served kernel, the build runs `apt-get update` once and tries again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from node.errors import NodeError
from node.template import is_built, rootfs_path
from node.vm import cpio
from node.vm.sandbox import OVER

KEEP = 2  # older builds kept beside the current one (another checkout's node may be about to start one)
FORMAT = 2  # bump when the build itself changes what it makes from the same inputs
META_PACKAGE = "linux-image-cloud-amd64"
MODULES = ("virtio_mmio", "virtio_console", "virtio-rng")  # and what they depend on
SKIP = (
    # documentation, translations, package management (apt, dpkg's database, debconf, perl, gpgv): no tool
    # runs them, and every byte here is unpacked at each boot
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian",
    "usr/share/bash-completion", "usr/share/common-licenses", "usr/share/perl*", "usr/share/keyrings",
    "usr/share/debconf", "var/cache/*", "var/lib/apt", "var/lib/dpkg", "var/log/*", "usr/lib/apt",
    "usr/lib/dpkg", "usr/bin/perl*", "usr/bin/dpkg*", "usr/bin/apt*", "usr/bin/gpgv", "usr/sbin/e2fsck",
    "usr/sbin/debugfs", "usr/sbin/mke2fs", "usr/sbin/ldconfig", "usr/bin/localedef",
    "usr/lib/x86_64-linux-gnu/gconv", "usr/lib/x86_64-linux-gnu/perl*", "usr/lib/x86_64-linux-gnu/libperl*",
    "usr/lib/x86_64-linux-gnu/libapt-*", "usr/lib/x86_64-linux-gnu/libdb-*",
    "usr/lib/x86_64-linux-gnu/libext2fs*", "usr/lib/x86_64-linux-gnu/libsemanage*",
    "usr/lib/x86_64-linux-gnu/libgnutls*", "usr/lib/x86_64-linux-gnu/libp11-kit*",
    "usr/lib/x86_64-linux-gnu/libstdc++*", "usr/lib/x86_64-linux-gnu/libhogweed*",
    "usr/lib/x86_64-linux-gnu/libnettle*", "usr/lib/x86_64-linux-gnu/libtasn1*",
    "usr/lib/python3.11/test", "usr/lib/python3.11/idlelib", "usr/lib/python3.11/ensurepip",
    "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/pydoc_data", "usr/lib/python3.11/__pycache__/pydoc*",
    ".b3os-base.json",
)  # fmt: skip
INIT_SOURCE = Path(__file__).with_name("guest_init.py")


class GuestError(NodeError):
    """The guest could not be built or found; the message says why."""


@dataclass(frozen=True)
class Guest:
    """A built guest: its kernel, its initramfs and what it was made of."""

    dir: Path
    key: str
    kernel_package: str

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.cpio"


def find_guest(guest_dir: Path) -> Guest | None:
    """The guest `<guest_dir>/current` points at, or None when none was built."""
    current = guest_dir / "current"
    try:
        meta = json.loads((current / "guest.json").read_text())
    except (OSError, ValueError):
        return None
    guest = Guest(current.resolve(), meta["key"], meta["kernel_package"])
    return guest if guest.kernel.is_file() and guest.initrd.is_file() else None


def _run(argv: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise GuestError(f"`{' '.join(argv)}` failed with exit status {proc.returncode}: {tail}")
    return proc.stdout


def kernel_package() -> str:
    """The versioned kernel package `linux-image-cloud-amd64` depends on now (from apt's local lists).

    Raises:
        GuestError: apt knows no such package (run `apt-get update` first).
    """
    out = _run(["apt-cache", "depends", META_PACKAGE])
    found = re.search(r"Depends: (linux-image-\S+-cloud-amd64)\b", out)
    if found is None:
        raise GuestError(f"apt knows no kernel package behind {META_PACKAGE}: run `apt-get update` first")
    return found.group(1)


def fetch_kernel(debs: Path, package: str) -> Path:
    """The package's .deb under `debs`, downloaded with `apt-get download` unless already there."""
    debs.mkdir(parents=True, exist_ok=True)
    have = sorted(debs.glob(f"{package}_*.deb"))
    if not have:
        _run(["apt-get", "download", "-q", package], cwd=debs)
        have = sorted(debs.glob(f"{package}_*.deb"))
    if not have:
        raise GuestError(f"apt-get download {package} left no .deb in {debs}")
    return have[-1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _base_signature(rootfs: Path) -> str:
    """Every base file's path, mode, size and mtime (not the bytes: a minute's hashing for each check)."""
    digest = hashlib.sha256()
    for here, dirs, files in os.walk(rootfs):
        dirs.sort()
        for name in sorted(files):
            st = os.lstat(os.path.join(here, name))
            rel = os.path.relpath(os.path.join(here, name), rootfs)
            digest.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return digest.hexdigest()


def guest_key(deb: Path, rootfs: Path) -> str:
    """The hash of everything a guest is made of."""
    parts = [f"format {FORMAT}", _sha256(deb), _base_signature(rootfs), _sha256(INIT_SOURCE)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _modinfo_depends(ko: Path) -> list[str]:
    found = re.search(rb"depends=([^\0]*)\0", ko.read_bytes())
    return [d for d in (found.group(1).decode().split(",") if found else []) if d]


def _module_order(modules_dir: Path, wanted: tuple[str, ...]) -> list[Path]:
    """The modules `wanted` and their dependencies, dependencies first."""
    by_name = {ko.stem: ko for ko in modules_dir.rglob("*.ko")}
    order: list[Path] = []

    def visit(name: str) -> None:
        ko = by_name.get(name) or by_name.get(name.replace("_", "-"))
        if ko is None:
            raise GuestError(f"the kernel package has no module {name}")
        if ko in order:
            return
        for dep in _modinfo_depends(ko):
            visit(dep)
        order.append(ko)

    for name in wanted:
        visit(name)
    return order


def _entries(rootfs: Path, unpacked: Path) -> tuple[list[cpio.Entry], bytes]:
    """The initramfs's entries and the kernel's bytes, from the unpacked kernel package."""
    kernels = sorted((unpacked / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise GuestError("the kernel package holds no /boot/vmlinuz-*")
    kernel = kernels[-1]
    clamp = int(kernel.stat().st_mtime)
    entries = cpio.tree(str(rootfs), skip=SKIP, clamp=clamp)
    version = kernel.name.removeprefix("vmlinuz-")
    modules = _module_order(unpacked / "lib/modules" / version, MODULES)
    have = {e.path for e in entries}
    mod_dir = f"usr/lib/modules/{version}"
    for path in ("usr/lib/modules", mod_dir):
        if path not in have:
            entries.append(cpio.Entry(path, stat.S_IFDIR | 0o755, mtime=clamp))
    listing = []
    for ko in modules:
        listing.append(f"/{mod_dir}/{ko.name}")
        entries.append(cpio.Entry(f"{mod_dir}/{ko.name}", stat.S_IFREG | 0o644, ko.read_bytes(), mtime=clamp))
    # the sandbox's files over the base: no host resolver or address
    entries = [e for e in entries if e.path not in OVER]
    entries += [cpio.Entry(p, stat.S_IFREG | 0o644, text.encode(), mtime=clamp) for p, text in OVER.items()]
    entries += [
        cpio.Entry("etc/b3os-blank", stat.S_IFREG | 0o444, mtime=clamp),
        cpio.Entry(
            "etc/b3os-modules", stat.S_IFREG | 0o644, "\n".join(listing).encode() + b"\n", mtime=clamp
        ),
        cpio.Entry("init", stat.S_IFREG | 0o755, INIT_SOURCE.read_bytes(), mtime=clamp),
        cpio.Entry("dev/console", stat.S_IFCHR | 0o600, mtime=clamp, rdev=(5, 1)),
    ]
    return entries, kernel.read_bytes()


@contextmanager
def _lock(guest_dir: Path) -> Iterator[None]:
    guest_dir.mkdir(parents=True, exist_ok=True)
    with open(guest_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def build_guest(guest_dir: Path, base_dir: Path, *, force: bool = False, deb: Path | None = None) -> Guest:
    """Build the guest unless the one of the same inputs is cached; point `current` at it.

    Args:
        deb: a kernel package already at hand (default: the one apt resolves, downloaded once).

    Raises:
        GuestError: no base template, apt cannot give the kernel package, or a step failed.
    """
    if not is_built(base_dir):
        raise GuestError(f"no base template in {base_dir}: run `b3os node build-base` first")
    rootfs = rootfs_path(base_dir)
    with _lock(guest_dir):
        if deb is None:
            try:
                package = kernel_package()
                deb = fetch_kernel(guest_dir / "debs", package)
            except GuestError:  # apt's lists missing or stale (a package no longer served): read them again
                _run(["apt-get", "update", "-q"])
                package = kernel_package()
                deb = fetch_kernel(guest_dir / "debs", package)
        else:
            package = deb.name.split("_")[0]
        key = guest_key(deb, rootfs)
        final = guest_dir / key
        if force and final.exists():
            shutil.rmtree(final)
        if not (final / "guest.json").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=guest_dir))
            try:
                unpacked = tmp / "deb"
                _run(["dpkg", "-x", str(deb), str(unpacked)])
                entries, kernel = _entries(rootfs, unpacked)
                out = tmp / "out"
                out.mkdir()
                (out / "vmlinuz").write_bytes(kernel)
                with open(out / "initrd.cpio", "wb") as fh:
                    cpio.write(fh, entries)
                meta = {
                    "key": key,
                    "kernel_package": package,
                    "kernel_sha256": hashlib.sha256(kernel).hexdigest(),
                    "initrd_sha256": _sha256(out / "initrd.cpio"),
                }
                (out / "guest.json").write_text(json.dumps(meta, indent=1) + "\n")
                for path in out.iterdir():
                    os.chmod(path, 0o644)
                os.chmod(out, 0o755)
                os.rename(out, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        link = guest_dir / f".current-{os.getpid()}"
        link.unlink(missing_ok=True)
        link.symlink_to(key)
        os.replace(link, guest_dir / "current")
        builds = [p for p in guest_dir.iterdir() if p.name != key and re.fullmatch(r"[0-9a-f]{20}", p.name)]
        for old in sorted(builds, key=lambda p: p.stat().st_mtime)[
            :-KEEP
        ]:  # (a running node holds its files)
            shutil.rmtree(old, ignore_errors=True)
    os.chmod(guest_dir, 0o755)
    guest = find_guest(guest_dir)
    if guest is None:
        raise GuestError(f"the guest built in {final} cannot be read back")
    return guest
