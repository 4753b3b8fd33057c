"""The exit statuses every command shares beside its own 0, 1 and 2 (light: `b3os --help` imports it)."""

from __future__ import annotations

EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): 128 + 2, as shells report a command a SIGINT ended."""
EXIT_BROKEN_PIPE = 141
"""The reader of the output went away (`b3os run show RUN | head -1`): 128 + 13 (SIGPIPE), as shells report
a tool SIGPIPE ended, without a word: what the reader wanted, it has read."""
