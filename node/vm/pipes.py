"""Small helpers for the pipes between the node and a VM: non-blocking reads, lines with a deadline."""

from __future__ import annotations

import json
import os
import select
import time


def read_some(fd: int) -> bytes | None:
    """What a non-blocking pipe holds now: b"" when nothing, None at end of file."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return b""
    return data or None


def drain(fd: int, limit: int, *, wait: bool = True) -> bytes:
    """Read what is left in a non-blocking pipe (at most `limit` bytes): with `wait`, its writers being all
    dead, up to its end (0.5 s at most); without, what it holds now."""
    chunks: list[bytes] = []
    got = 0
    end = time.monotonic() + 0.5
    while got < limit and time.monotonic() < end:
        data = read_some(fd)
        if data is None:
            break
        if not data:
            if not wait:
                break
            select.select([fd], [], [], 0.01)
            continue
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def read_until(fd: int, deadline: float, *, size: int = 0, line: bool = False) -> tuple[bytes, bool]:
    """Read from a blocking pipe until end of file, `size` bytes or (with `line`) a newline, or the deadline.

    Returns:
        The bytes read, and whether the pipe reached end of file.
    """
    buf = b""
    while not ((line and b"\n" in buf) or (size and len(buf) >= size)):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return buf, False
        data = os.read(fd, 4096)
        if not data:
            return buf, True
        buf += data
    return buf, False


def json_int(line: bytes, key: str) -> int | None:
    """The integer `key` of the JSON object on the first line of `line` (None when there is none)."""
    try:
        value = json.loads(line.split(b"\n", 1)[0] or b"null")
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get(key), int):
        return int(value[key])
    return None


def pipe_of(data: bytes) -> int:
    """The read end of a pipe that holds `data` (at most a pipe's buffer, 64 KiB) and then end of file."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end
