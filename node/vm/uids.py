"""The host uids of a node's VMs: one per VM alive at a time, from a reserved range, never shared.

A VM runs as its own host uid and gid (`base + i`, i below `count`), so that what the kernel counts per
uid (keyring and inotify quotas, `RLIMIT_NPROC`, `/proc/key-users`) and who may read a VM's files are the
VM's alone. A uid is taken when a VM is prepared and given back once every process of that VM is dead;
the driver sizes the range to the VMs that can be alive at once (calls at once plus the pool).
"""

from __future__ import annotations

from node.vm.base import VmError

MAX_ID = 2**32 - 2  # (uid_t)-1 means "no change" to setuid and chown


class UidPool:
    """Hands out the uids `base .. base + count - 1`, each to one VM at a time (not thread-safe: the
    driver holds its lock around every use)."""

    def __init__(self, base: int, count: int) -> None:
        """Raises:
        VmError: reason "no_slot" when the range holds root or passes the largest uid.
        """
        if base <= 0 or count < 1 or base + count - 1 > MAX_ID:
            raise VmError(
                "no_slot", f"the VMs' uid range {base}..{base + count - 1} is not usable (not root)"
            )
        self.base, self.count = base, count
        self._free = list(range(base + count - 1, base - 1, -1))  # popped from the end: base first

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
