"""A run's inputs: the values given checked against the routine's `inputs:`, defaults filled in.

Errors::

    RoutineInputError    a run's inputs do not fit the routine's inputs (`problems`: list of str)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import EngineError
from engine.routine import Routine
from packs.schemas import schema_errors


class RoutineInputError(EngineError):
    """A run's inputs do not fit the routine; `problems` name each input at fault."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def resolve_inputs(routine: Routine, given: Mapping[str, Any]) -> dict[str, Any]:
    """A run's inputs: the given values checked against each input's schema, defaults filled in.

    Raises:
        RoutineInputError: an unknown input, a missing required one, or a value that does not fit.
    """
    problems: list[str] = []
    for name in given:
        if name not in routine.inputs:
            known = ", ".join(routine.inputs) or "none"
            problems.append(f"routine '{routine.name}' has no input '{name}' (inputs: {known})")
    result: dict[str, Any] = {}
    for name, spec in routine.inputs.items():
        if name in given:
            value = given[name]
        elif spec.required:
            problems.append(f"input '{name}' is required")
            continue
        else:
            value = spec.default
        for error in schema_errors(spec.json_schema(), value):
            at = "".join(f"[{p!r}]" for p in error.absolute_path)
            problems.append(f"input '{name}'{at}: {error.message}")
        result[name] = value
    if problems:
        raise RoutineInputError(problems)
    return result
