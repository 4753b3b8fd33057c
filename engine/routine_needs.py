"""Checks of the steps' `needs:`, and which steps each step may read.

A step's `needs:` names steps of the routine, each once, never the step itself, with no cycle
(`a` needs `b` needs `a`: neither could start). A step reads only the steps it needs, directly or
through others (engine.routine_checks asks `readable_steps`). Like engine.routine_checks, this works
on the raw YAML data and returns `(line, column, message)` triples, which engine.validate gathers.
"""

from __future__ import annotations

from typing import Any

from engine.step_graph import direct_needs, transitive_needs
from engine.yaml_positions import Located

Triple = tuple[int, int, str]


def _steps(data: dict[str, Any]) -> list[tuple[int, str, Any]]:
    """`(index, id, needs)` of each step that has a string id (needs as written, or None)."""
    steps = data.get("steps")
    found: list[tuple[int, str, Any]] = []
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, dict) and isinstance(step.get("id"), str):
            found.append((i, step["id"], step.get("needs")))
    return found


def _graph(data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each step's direct needs, leaving out what the checks refuse (unknown ids, itself, non-strings)."""
    steps = _steps(data)
    ids = {sid for _, sid, _ in steps}
    written: list[tuple[str, list[str] | None]] = []
    for _, sid, needs in steps:
        if isinstance(needs, list):
            written.append((sid, [n for n in needs if isinstance(n, str) and n in ids and n != sid]))
        else:
            written.append((sid, None))  # absent, or not a list (the models report that)
    return direct_needs(written)


def readable_steps(data: dict[str, Any]) -> dict[str, frozenset[str]]:
    """The steps each step may read: those it needs, directly or through others."""
    return transitive_needs(_graph(data))


def explicit_needs(data: dict[str, Any]) -> set[str]:
    """The ids of the steps that set `needs:`."""
    return {sid for _, sid, needs in _steps(data) if needs is not None}


def check_needs(data: dict[str, Any], doc: Located) -> list[Triple]:
    """Each `needs:` item names another step of the routine, once; and the needs have no cycle."""
    problems: list[Triple] = []
    steps = _steps(data)
    ids = [sid for _, sid, _ in steps]
    for i, sid, needs in steps:
        if not isinstance(needs, list):
            continue
        seen: set[str] = set()
        for j, need in enumerate(needs):
            if not isinstance(need, str):
                continue  # the models report the type
            at = doc.position(("steps", i, "needs", j))
            if need == sid:
                problems.append((*at, f"step '{sid}': needs: a step cannot need itself"))
            elif need not in ids:
                problems.append((*at, f"step '{sid}': needs: no step '{need}' (steps: {', '.join(ids)})"))
            elif need in seen:
                problems.append((*at, f"step '{sid}': needs: '{need}' is named twice"))
            seen.add(need)
    problems.extend(_cycles(data, doc, steps))
    return problems


def _cycles(data: dict[str, Any], doc: Located, steps: list[tuple[int, str, Any]]) -> list[Triple]:
    """One problem per cycle, at the `needs:` item of the cycle's first step (in file order)."""
    graph = _graph(data)
    index = {sid: i for i, sid, _ in steps}
    problems: list[Triple] = []
    reported: set[str] = set()
    for _, sid, needs in steps:
        if sid in reported:
            continue
        path = _cycle_from(sid, graph)
        if path is None:
            continue
        reported.update(path)
        nxt = path[1]
        j = needs.index(nxt) if isinstance(needs, list) and nxt in needs else None
        where = ("steps", index[sid], "needs", j) if j is not None else ("steps", index[sid])
        shown = " -> ".join([*path])
        problems.append(
            (
                *doc.position(where),
                f"step '{sid}': needs: {shown} is a cycle: each of these steps waits for the next, "
                "so none of them could start",
            )
        )
    return problems


def _cycle_from(start: str, graph: dict[str, tuple[str, ...]]) -> list[str] | None:
    """A path start -> ... -> start through the needs, when there is one (depth first, in needs order)."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for need in reversed(graph.get(node, ())):
            if need == start:
                return [*path, start]
            if need not in seen:
                seen.add(need)
                stack.append((need, [*path, need]))
    return None
