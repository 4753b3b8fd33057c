"""The small mount namespace a node's VMs are spawned in, held by one process (`launch --hold`).

bwrap copies (and then detaches) the whole mount table of the namespace it starts in: with the host's
(hundreds of mounts on a busy machine) that is most of a VM's cost. So the node starts the launcher's
`--hold` mode once (see `launcher.c`): a tmpfs root with the few host directories bwrap needs and the
node's directory, whose later mounts reach it. VMs are spawned in it through the descriptor of its mount
namespace. The process dies with the node.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from node.vm import pipes
from node.vm.bwrap_vm import SETUP_S, SetupError


def hold_namespace(launcher: Path, node_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start the holder and open its mount namespace: the process and the descriptor.

    Raises:
        SetupError: the namespace could not be made.
    """
    holder = subprocess.Popen(
        [str(launcher), "--hold", str(node_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        cwd="/",
        env={},
    )
    assert holder.stdout is not None and holder.stderr is not None
    ready, _ = pipes.read_until(holder.stdout.fileno(), time.monotonic() + SETUP_S, size=1)
    if ready != b"R":
        holder.kill()
        why = holder.stderr.read().decode(errors="replace").strip()
        stop_holder(holder, -1)
        raise SetupError(f"the VMs' mount namespace could not be made: {why or 'no answer'}")
    return holder, os.open(f"/proc/{holder.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def stop_holder(holder: subprocess.Popen[bytes] | None, ns_fd: int) -> None:
    """Close the namespace's descriptor (when >= 0) and kill and reap the holder (when there is one)."""
    if ns_fd >= 0:
        os.close(ns_fd)
    if holder is not None:
        with contextlib.suppress(ProcessLookupError):
            holder.kill()
        holder.wait()
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()
