"""The host uids of a node's VMs: one per VM alive at a time, from a reserved range, never shared.

A VM runs as its own host uid and gid (`base + i`, i below `count`), so that what the kernel counts per
uid (keyring and inotify quotas, `RLIMIT_NPROC`, `/proc/key-users`) and who may read a VM's files are the
VM's alone. A uid is taken when a VM is prepared and given back once every process of that VM is dead;
the driver sizes the range to the VMs that can be alive at once (calls at once plus the pool).

The range must be no one else's: not root, no host user or group, and outside the subordinate ids of
`/etc/subuid` and `/etc/subgid` (a user's rootless containers run as those). The default base,
1,900,000,000, lies above systemd's container range (up to 1,879,048,191) and below 2^31.

Nor another node's on the same host: a node holds its range for as long as it lives, as a file
`<base>-<count>` under `RANGES_DIR` (`/run/b3os/uid-ranges`) that it keeps locked (flock). A range that
overlaps one a live node holds is drawn again just above it (and the node says so); a file whose lock
nobody holds is a dead node's and is removed. So two nodes started with the same `B3OS_VM_UID_BASE`
(the default) never share a uid.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import logging
import os
import pwd
from pathlib import Path

from node.vm.base import VmError

log = logging.getLogger(__name__)

MAX_ID = 2**32 - 2  # (uid_t)-1 means "no change" to setuid and chown
SUBORDINATE = (Path("/etc/subuid"), Path("/etc/subgid"))
RANGES_DIR = Path("/run/b3os/uid-ranges")


def hold_range(base: int, count: int, directory: Path | None = None) -> tuple[int, int]:
    """Hold `count` uids from `base` up for this process, or from just above the live ranges it meets:
    the first uid held and the locked file's descriptor (closing it gives the range back)."""
    directory = directory or RANGES_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    guard = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one node at a time draws
        held = _live_ranges(directory)
        start = base
        while clash := [(b, c) for b, c in held if b < start + count and start < b + c]:
            start = max(b + c for b, c in clash)
        if start != base:
            log.warning(
                "the VMs' uids %d..%d are another node's: this node's VMs use %d..%d",
                base, base + count - 1, start, start + count - 1,
            )  # fmt: skip
        fd = os.open(directory / f"{start}-{count}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return start, fd
    finally:
        os.close(guard)


def _live_ranges(directory: Path) -> list[tuple[int, int]]:
    """The ranges live nodes hold (a file nobody holds locked is removed: its node died)."""
    live = []
    for path in directory.iterdir():
        first, sep, size = path.name.partition("-")
        if not (sep and first.isdigit() and size.isdigit()):
            continue
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live.append((int(first), int(size)))
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        finally:
            os.close(fd)
    return live


class UidPool:
    """Hands out the uids `base .. base + count - 1`, each to one VM at a time (not thread-safe: the
    driver holds its lock around every use)."""

    def __init__(self, base: int, count: int, *, ranges_dir: Path | None = None) -> None:
        """Hold a range of `count` uids from `base` up (or just above another node's, `hold_range`) and
        check it against the host's users and groups.

        Raises:
            VmError: reason "no_slot" when the range holds root, a host user's uid or a host group's gid (its
                members could read the VM's input files), or passes the largest uid.
        """
        last = base + count - 1
        if base <= 0 or count < 1 or last > MAX_ID:
            raise VmError("no_slot", f"the VMs' uid range {base}..{last} is not usable (never root)")
        base, self._held = hold_range(base, count, ranges_dir)
        try:
            self._check(base, count)
        except BaseException:
            self.close()
            raise
        self.base, self.count = base, count
        self._free = list(range(base + count - 1, base - 1, -1))  # popped from the end: base first

    def close(self) -> None:
        """Give the range back (another node may draw it)."""
        if self._held >= 0:
            os.close(self._held)
            self._held = -1

    @staticmethod
    def _check(base: int, count: int) -> None:
        last = base + count - 1
        if last > MAX_ID:
            raise VmError("no_slot", f"the VMs' uid range {base}..{last} passes the largest uid")
        for path in SUBORDINATE:
            for start, size, owner in _subordinate(path):
                if start <= last and base < start + size:
                    raise VmError(
                        "no_slot",
                        f"the VMs' uid range {base}..{last} overlaps {owner}'s subordinate ids in {path}: "
                        "choose another B3OS_VM_UID_BASE",
                    )
        for uid in range(base, base + count):
            for kind, lookup in (("user", pwd.getpwuid), ("group", grp.getgrgid)):
                try:
                    name = lookup(uid)[0]
                except KeyError:
                    continue
                raise VmError(
                    "no_slot",
                    f"the VMs' uid range {base}..{last} holds the host {kind} {name} ({uid}): "
                    "choose another B3OS_VM_UID_BASE",
                )

    def take(self) -> int | None:
        """A free uid (also the VM's gid), or None when every one is in use."""
        return self._free.pop() if self._free else None

    def give(self, uid: int) -> None:
        """Give back a uid whose VM has no process left."""
        if self.base <= uid < self.base + self.count and uid not in self._free:
            self._free.append(uid)

    def __contains__(self, uid: int) -> bool:
        return self.base <= uid < self.base + self.count

    @property
    def free(self) -> int:
        """How many uids are free now."""
        return len(self._free)


def _subordinate(path: Path) -> list[tuple[int, int, str]]:
    """(first id, count, owner) of each line of an /etc/subuid-like file (none when it is missing)."""
    found = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found.append((int(parts[1]), int(parts[2]), parts[0]))
    return found
