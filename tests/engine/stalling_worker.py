"""`python tests/engine/stalling_worker.py`: the routine worker (`engine.worker.run`, unchanged) whose
`if:` evaluation stalls on purpose, for tests/engine/test_workflow_stuck.py: an `if:` naming
`inputs.spin` first spins 60 s in Python (which the SDK's deadlock detection can interrupt), one naming
`inputs.block` first waits for a lock nobody releases (in C, which nothing in the process can
interrupt). Every other `if:` is evaluated as usual."""

from __future__ import annotations

import threading
import time
from typing import Any

import engine.expressions as expressions
from engine import worker

_condition = expressions.evaluate_condition
_never = threading.Lock()
_never.acquire()


def _stalling(value: Any, *args: Any, **kwargs: Any) -> bool:
    if isinstance(value, str) and "inputs.spin" in value:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            pass
    if isinstance(value, str) and "inputs.block" in value:
        _never.acquire()
    return _condition(value, *args, **kwargs)


expressions.evaluate_condition = _stalling  # type: ignore[assignment]

if __name__ == "__main__":
    worker.run()
