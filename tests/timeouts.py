"""What a timed-out tool's error says (node.runner): that its command did not finish in the call's time,
or, when the node took over a quarter of that to start it (a free slot, its VM: a busy machine), how
long the command had and how long the node took. Tests accept either."""

from __future__ import annotations

import re


def is_timeout_sentence(message: str, timeout_ms: int) -> bool:
    """Whether `message` is the node's sentence for a command that ran out of the call's `timeout_ms`."""
    if message == f"the tool's command did not finish in {timeout_ms} ms":
        return True
    started_late = (
        rf"the tool's command did not finish in the \d+ ms left of the call's {timeout_ms} ms: "
        r"the node took \d+ ms to start it \(a free slot, its VM\)"
    )
    return re.fullmatch(started_late, message) is not None
