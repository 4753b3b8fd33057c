"""What one case's run is answered with and what it called: the step activity of `b3os routine test`
(activities/fixture_call.py) fills it, the expectations (engine.offline.expect) read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.offline.cases import Answer


@dataclass
class CaseBook:
    """One case's answers, and what its run called: each call's input and what answered it."""

    answers: dict[str, list[Answer]]
    test_file: str
    calls: dict[str, dict[int | None, dict[str, Any]]] = field(default_factory=dict)
    answered_by: dict[str, dict[int | None, str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def inputs_of(self, step_id: str) -> list[dict[str, Any]]:
        """The inputs of a step's calls in item order (a retried call once)."""
        calls = self.calls.get(step_id, {})
        return [calls[i] for i in sorted(calls, key=lambda i: -1 if i is None else i)]
