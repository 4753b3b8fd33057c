"""Reading a VM's output files: only regular files directly under /out, within the size limit."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from node.vm.base import OutputFileError

FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def read_out_files(out_dir: Path, names: Sequence[str], *, max_total: int) -> dict[str, bytes]:
    """Read each named file from `out_dir` (the host side of /out), refusing anything but regular files.

    Raises:
        OutputFileError: a name is not a plain file name, the entry is a symlink, directory, device or
            missing, or the files together pass `max_total` bytes.
    """
    files: dict[str, bytes] = {}
    total = 0
    for name in names:
        if not FILE_NAME.match(name):
            raise OutputFileError(f"output file /out/{name} is not a file name directly under /out")
        try:
            fd = os.open(out_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:
            raise OutputFileError(f"output file /out/{name} does not exist") from None
        except OSError as exc:
            raise OutputFileError(f"output file /out/{name} is not a regular file (a symlink?)") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise OutputFileError(f"output file /out/{name} is {kind}")
            total += info.st_size
            if total > max_total:
                raise OutputFileError(f"output files pass {max_total} bytes in all (at /out/{name})")
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(max_total + 1)
        finally:
            os.close(fd)
        files[name] = data
    return files
