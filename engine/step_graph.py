"""The graph of a routine's steps: which steps each one waits for.

A step waits for the steps its `needs:` names (`[]`: none); a step without `needs:` waits for the step
before it (the first step for none). The workflow, the validator (engine.routine_needs) and a re-run
(api.runs.rerun) read the graph from here. Standard library only: the workflow sandbox loads it.
"""

from __future__ import annotations


def direct_needs(steps: list[tuple[str, list[str] | None]]) -> dict[str, tuple[str, ...]]:
    """The steps each step waits for: its `needs:`, or the step before it when it has none.

    Args:
        steps: `(id, needs)` of each step, in file order (`needs` None when the step sets none).
    """
    found: dict[str, tuple[str, ...]] = {}
    before: str | None = None
    for step_id, needs in steps:
        if needs is None:
            found.setdefault(step_id, () if before is None else (before,))
        else:
            found.setdefault(step_id, tuple(dict.fromkeys(needs)))
        before = step_id
    return found


def transitive_needs(needs: dict[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    """The steps each step waits for, directly or through others (never itself; unknown ids ignored)."""
    found: dict[str, frozenset[str]] = {}
    for start in needs:
        seen: set[str] = set()
        stack = [n for n in needs[start] if n in needs]
        while stack:
            step_id = stack.pop()
            if step_id in seen:
                continue
            seen.add(step_id)
            stack.extend(n for n in needs[step_id] if n in needs and n not in seen)
        seen.discard(start)
        found[start] = frozenset(seen)
    return found
