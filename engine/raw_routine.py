"""A routine's raw YAML data as the checks read it, before the models have accepted it (engine.validate
checks it both ways): lists and mappings taken as they are, or as empty, and how a problem names a step
or a place in the file.
"""

from __future__ import annotations

from typing import Any

from engine.yaml_positions import Path


def as_list(value: Any) -> list[Any]:
    """`value` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a mapping, else an empty one."""
    return value if isinstance(value, dict) else {}


def step_label(step: Any, i: int) -> str:
    """`step 'fetch'`, or `step 3` for a step without a string id (`i` counts from 0)."""
    sid = step.get("id") if isinstance(step, dict) else None
    return f"step '{sid}'" if isinstance(sid, str) else f"step {i + 1}"


def place(data: dict[str, Any], path: Path) -> str:
    """`step 'fetch': with.text` or `outputs.o`, for a message."""
    if len(path) >= 2 and path[0] == "steps" and isinstance(path[1], int):
        rest = ".".join(str(p) for p in path[2:])
        label = step_label(as_list(data.get("steps"))[path[1]], path[1])
        return f"{label}: {rest}" if rest else label
    return ".".join(str(p) for p in path) or "the routine"
