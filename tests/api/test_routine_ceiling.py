"""The foreach bound of a run's cost ceiling (api.routines.ceiling.foreach_items), rule by rule."""

from __future__ import annotations

from typing import Any

import pytest

from api.routines.ceiling import foreach_items
from engine.routine import Routine

INPUTS = {
    "names": {"type": "array", "maxItems": 4},
    "many": {"type": "array", "maxItems": 50000},
    "free": {"type": "array"},
    "count": {"type": "integer", "default": 3},
}


def _items(foreach: Any, inputs: dict[str, Any]) -> tuple[int | None, str, str | None]:
    routine = Routine.model_validate(
        {
            "name": "r",
            "inputs": INPUTS,
            "steps": [
                {"id": "first", "uses": "a.b/c/d@1"},
                {"id": "each", "uses": "a.b/c/d@1", "foreach": foreach},
            ],
        }
    )
    return foreach_items(routine, routine.steps[1], inputs)


@pytest.mark.parametrize(
    ("foreach", "inputs", "items", "source"),
    [
        (["a", "b"], {}, 2, "literal"),
        ("${{ inputs.names }}", {"names": ["a", "b", "c"]}, 3, "inputs"),  # given: its length, not maxItems
        ("inputs.names.filter(n, n != 'b')", {"names": ["a", "b", "c"]}, 2, "inputs"),  # evaluated
        ("${{ inputs.names }}", {}, 4, "max_items"),  # not given: the schema's maxItems
        ("${{ inputs.many }}", {}, 10_000, "max_items"),  # a run stops a foreach past 10,000 items
        ("${{ [1, 2, 3].filter(x, x < inputs.count) }}", {"count": 3}, 2, "inputs"),
        ("${{ inputs.names[5] }}", {"names": ["a"]}, 0, "failing"),  # the step fails before any call
    ],
)
def test_a_foreach_is_bounded_by_what_the_inputs_and_schema_say(
    foreach: Any, inputs: dict[str, Any], items: int, source: str
) -> None:
    assert _items(foreach, inputs)[:2] == (items, source)


def test_a_foreach_over_a_step_or_an_input_without_bound_is_named_unbounded() -> None:
    assert _items("${{ steps.first.output.list }}", {}) == (
        None,
        "unbounded",
        "foreach: steps.first.output.list reads steps.first: its list is known only when the run gets there",
    )
    assert _items("inputs.names.filter(n, n != '')", {})[:2] == (None, "unbounded")  # not the input itself
    assert _items("${{ inputs.free }}", {}) == (
        None,
        "unbounded",
        "foreach: inputs.free reads inputs.free, which the estimate was not given and whose schema has no "
        "maxItems: give the input, or a maxItems",
    )
