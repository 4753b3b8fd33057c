"""The VM launcher (`launcher.c`): built once per node with the C compiler, static, into the node's directory.

A pooled VM's bwrap runs `/tool/launch <ctl fd> <err fd>` ahead of any call: `/tool` is at first a read-only
bind of the directory holding the launcher, and the call's tool tree is later mounted over it (so the tool
never sees the launcher). The launcher writes `R` on the err fd when it runs, reads the call's command (NUL
ended arguments) from the ctl fd, and execve()s it; the err fd is close-on-exec, so end of file there means
the command started and 4 bytes are the errno of a failed execve.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from node.errors import NodeError

SOURCE = Path(__file__).with_name("launcher.c")
NAME = "launch"
VM_PATH = f"/tool/{NAME}"


class LauncherError(NodeError):
    """The launcher could not be built; the message says why."""


def build_launcher(dest_dir: Path) -> Path:
    """Compile the launcher into `dest_dir/launch` (root-owned, mode 0755) and return `dest_dir`.

    Raises:
        LauncherError: no C compiler, or it failed (its first error line is in the message).
    """
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise LauncherError("no C compiler to build the VM launcher (Debian packages gcc and libc6-dev)")
    dest_dir.mkdir(mode=0o755, exist_ok=True)
    os.chmod(dest_dir, 0o755)
    target = dest_dir / NAME
    proc = subprocess.run(
        [cc, "-static", "-O2", "-s", "-o", str(target), str(SOURCE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        first = next(iter(proc.stdout.strip().splitlines()), "")
        raise LauncherError(f"the VM launcher did not compile (exit status {proc.returncode}): {first}")
    os.chmod(target, 0o755)
    return dest_dir
