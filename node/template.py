"""The base template: a Debian bookworm rootfs with python3 and jq, built once and cached.

`build_base(base_dir)` runs `debootstrap --variant=minbase --include=python3,jq bookworm` into a temporary
directory beside the cache and renames it into place, so a reader never sees a half-built tree. The mirror is
read from the machine's apt sources (`/etc/apt/sources.list.d/*.sources`, then `/etc/apt/sources.list`), never
written in code. A file lock keeps two builders (two test sessions) from building at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from node.errors import NodeError

SUITE = "bookworm"
PACKAGES = ("python3", "jq")
MOUNT_POINTS = ("tool", "in", "out", "work")
MARKER = ".b3os-base.json"
SOURCES_DIR = Path("/etc/apt/sources.list.d")
SOURCES_LIST = Path("/etc/apt/sources.list")


class TemplateError(NodeError):
    """The base template could not be found or built; the message says why."""


def rootfs_path(base_dir: Path) -> Path:
    """Where the built rootfs lives under `base_dir`."""
    return base_dir / "rootfs"


def is_built(base_dir: Path) -> bool:
    """True when a complete rootfs (with its marker file) is cached under `base_dir`."""
    return (rootfs_path(base_dir) / MARKER).is_file()


def apt_mirror(sources_dir: Path = SOURCES_DIR, sources_list: Path = SOURCES_LIST) -> str:
    """The first Debian mirror URI of the machine's apt sources that serves the bookworm suite.

    Raises:
        TemplateError: no apt source names a mirror for bookworm.
    """
    candidates: list[tuple[str, list[str]]] = []
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    candidates.append((uri, fields.get("suites", "").split()))
    if sources_list.is_file():
        for line in sources_list.read_text(errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb":
                rest = [
                    w for w in words[1:] if not w.startswith("[") and not w.endswith("]") and "=" not in w
                ]
                if len(rest) >= 2:
                    candidates.append((rest[0], rest[1:2]))
    for uri, suites in candidates:
        if SUITE in suites:
            return uri
    raise TemplateError(
        f"no apt source serves the {SUITE} suite (looked in {sources_dir}/*.sources and {sources_list})"
    )


@contextmanager
def _lock(base_dir: Path) -> Iterator[None]:
    base_dir.mkdir(parents=True, exist_ok=True)
    with open(base_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_base(base_dir: Path, *, force: bool = False, mirror: str | None = None) -> Path:
    """Build the base rootfs under `base_dir` unless it is already there; return its path.

    Args:
        base_dir: the cache directory (`B3OS_BASE_DIR`, default `~/.b3os/base`).
        force: build again even when a rootfs is cached; the old one is replaced atomically.
        mirror: the Debian mirror; default the machine's apt sources.

    Raises:
        TemplateError: debootstrap is missing or failed (its last output lines are in the message).
    """
    final = rootfs_path(base_dir)
    with _lock(base_dir):
        if is_built(base_dir) and not force:
            return final
        debootstrap = shutil.which("debootstrap") or next(
            (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.path.exists(p)), None
        )
        if debootstrap is None:
            raise TemplateError("debootstrap is not installed (Debian package `debootstrap`; `make setup`)")
        if os.geteuid() != 0:
            raise TemplateError("building the base template needs root (debootstrap creates device nodes)")
        uri = mirror or apt_mirror()
        tmp = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=base_dir))
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp), uri],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                tail = " | ".join(proc.stdout.strip().splitlines()[-3:])
                raise TemplateError(f"debootstrap failed with exit status {proc.returncode}: {tail}")
            _finish(tmp, uri, time.monotonic() - started)
            if final.exists():
                old = base_dir / f".rootfs-old-{os.getpid()}"
                os.rename(final, old)
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _finish(root: Path, mirror: str, seconds: float) -> None:
    """Make the mount points, drop apt's package cache and write the marker file."""
    os.chmod(root, 0o755)  # mkdtemp made it 0700: the VM's user must be able to enter its root
    for name in MOUNT_POINTS:
        (root / name).mkdir(mode=0o755, exist_ok=True)
    for cached in (root / "var/cache/apt/archives").glob("*.deb"):
        cached.unlink()
    marker = {"suite": SUITE, "packages": list(PACKAGES), "mirror": mirror, "seconds": round(seconds, 1)}
    (root / MARKER).write_text(json.dumps(marker) + "\n")
