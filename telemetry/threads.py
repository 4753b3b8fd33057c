"""Threads named as the operating system shows them (`top -H`, `ps -L`, `/proc/<pid>/task/<tid>/comm`,
perf): CPython 3.11 names a thread for Python only. A node's VM pool threads carry their names there, so
that their CPU (preparing and removing VMs, off the calls' path) is told apart from the calls' own
(`bench goals`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

_PR_SET_NAME = 15
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def name_os_thread() -> None:
    """Give the calling thread its Python name as its OS name (cut to the kernel's 15 bytes)."""
    _libc.prctl(_PR_SET_NAME, threading.current_thread().name.encode()[:15], 0, 0, 0)
