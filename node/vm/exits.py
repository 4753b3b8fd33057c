"""How a VM's command ended, from the kernel: the exit status of its process, read through a pidfd.

The node opens a pidfd on the VM's launcher process (which later execve()s the command, keeping its pid)
before the call, so nothing in the VM stands between the command's exit and the node: the pidfd becomes
readable when the command exits, and once the process is reaped (by the VM's init, or by the kernel when
the node kills the VM) `PIDFD_GET_INFO` with `PIDFD_INFO_EXIT` gives its wait status. A tool that stops or
corrupts the sandbox's init can then neither hold back nor forge its call's outcome. Linux 6.15 and later;
on older kernels `exit_status` answers None and the driver falls back on bwrap's own report.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import struct

# struct pidfd_info (include/uapi/linux/pidfd.h) up to exit_code: PIDFD_INFO_SIZE_VER0, 64 bytes
_INFO_SIZE = 64
_EXIT_CODE_AT = 60
PIDFD_INFO_EXIT = 1 << 3
PIDFD_GET_INFO = (3 << 30) | (_INFO_SIZE << 16) | (0xFF << 8) | 11  # _IOWR(0xFF, 11, struct pidfd_info)


def exit_status(pidfd: int) -> int | None:
    """The wait status of the reaped process of `pidfd`; None when the kernel does not say (yet)."""
    buf = bytearray(_INFO_SIZE)
    struct.pack_into("=Q", buf, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, buf)
    except OSError:  # ENOTTY/EINVAL: a kernel before 6.15; ESRCH: not reaped yet
        return None
    if not struct.unpack_from("=Q", buf, 0)[0] & PIDFD_INFO_EXIT:
        return None
    return int(struct.unpack_from("=i", buf, _EXIT_CODE_AT)[0])


@functools.cache
def supported() -> bool:
    """Whether this kernel gives exit statuses through pidfds (asked once, of this process's own pidfd)."""
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    try:
        fcntl.ioctl(fd, PIDFD_GET_INFO, bytearray(_INFO_SIZE))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_pidfd(pid: int) -> int:
    """A pidfd for `pid` (-1 when the process is gone or pidfds are not supported)."""
    with contextlib.suppress(OSError):
        return os.pidfd_open(pid)
    return -1
