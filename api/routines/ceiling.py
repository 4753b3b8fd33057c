"""A run's cost ceiling: the most a run of a routine version can cost, per step and in all, in micro-USD.

Each step counts as taken (an `if:` may skip it, never make it dearer), and each of its calls as charged
the most it can be (api.calls.costs.call_ceiling): its compute for its whole time at its VM's full size, its
floor, and the publisher's price once. A step calls

    attempts x (compute + floor) + price        per item (a failed attempt is charged compute and the
                                                 floor, never the price; only the attempt that succeeds
                                                 is charged the price)

where `attempts` is its `max-attempts` (3 by default: waits on 429 and 503 are neither counted nor
charged), times its items: 1 without `foreach:`; a literal list's length; the length of the list the
inputs give when its expression reads inputs only (evaluated as the run would); else, for `foreach:
inputs.<name>` of an input the estimate was not given, that input's `maxItems`; else the step is
**unbounded** (its list comes from another step's output, known only when the run gets there) and so is
the run's ceiling. A foreach's items are at most 10,000 (`engine.runs.FOREACH_MAX_ITEMS`: past that the
step fails before any call). A call's time is the step's `timeout` for a free action, the action's own
for a priced one (as the call service times a step's call), at most the api's `B3OS_MAX_CALL_TIMEOUT_MS`.

`ceiling(...)` is pure; `pin_facts(...)` reads what it needs of each pinned action from the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from api.calls.costs import VM_MEMORY_MB, VM_VCPU, action_price_microusd, call_ceiling
from api.calls.settings import CallSettings
from api.rawsql import Reads
from api.registry import catalog
from api.routines.models import CallCeilingPublic, RoutineEstimate, StepCeiling
from engine import expressions
from engine.durations import duration_ms
from engine.routine import RetryPolicy, Routine, Step
from engine.runs import FOREACH_MAX_ITEMS
from packs.resolve import parse_ref

_INPUT = re.compile(r"^inputs\.([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class PinFacts:
    """What the ceiling needs of one pinned action: its kind, price, own timeout and VM size."""

    pin: str
    kind: str
    price: int
    timeout_ms: int | None
    vcpu: int = VM_VCPU
    memory_mb: int = VM_MEMORY_MB


def pin_facts(reads: Reads, pins: dict[str, str], known: catalog.KnownVersions) -> dict[str, PinFacts]:
    """Each `uses:` of `pins` and what its exact pin costs (its version read once, then kept in `known`).

    Raises:
        ResolveError: a pin no longer resolves.
    """
    facts: dict[str, PinFacts] = {}
    for uses, pin in pins.items():
        ref = parse_ref(pin)
        resolved, raw = catalog.resolve_known(reads, ref=ref, known=known)
        price = action_price_microusd(raw, catalog.find_action(raw, ref.action) or {})
        tool = resolved.manifest.tool
        size = tool.size if tool is not None else None
        facts[uses] = PinFacts(
            pin=resolved.pin,
            kind=resolved.kind,
            price=price,
            timeout_ms=resolved.action.execution.timeout_ms,
            vcpu=size.vcpu if size else VM_VCPU,
            memory_mb=size.memory_mb if size else VM_MEMORY_MB,
        )
    return facts


def call_ms(facts: PinFacts, step: Step, settings: CallSettings) -> int:
    """The longest one call of the step may take, by the call service's rule for a step's call: a priced
    action runs to its own timeout, a free one to the least of the step's and its own."""
    own = facts.timeout_ms or settings.default_action_timeout_ms
    asked = duration_ms(step.timeout) if step.timeout else None
    if asked is None or facts.price > 0:
        return min(own, settings.max_call_timeout_ms)
    return min(asked, own, settings.max_call_timeout_ms)


def ceiling(
    routine: Routine,
    *,
    version: str,
    inputs: dict[str, Any],
    facts: dict[str, PinFacts],
    settings: CallSettings,
) -> RoutineEstimate:
    """The most a run of `routine` with `inputs` can cost (see the module docstring).

    Args:
        routine: the routine version. version: its hash.
        inputs: the inputs known: those given and the defaults of the others (a required input not given
            is left out: a foreach over it is bounded by its maxItems).
        facts: each `uses:` and its pin's facts (`pin_facts`).
        settings: the api's unit prices and call times.
    """
    prices = settings.unit_prices()
    steps: list[StepCeiling] = []
    for step in routine.steps:
        pin = facts[step.uses]
        timeout_ms = call_ms(pin, step, settings)
        one = call_ceiling(
            prices,
            kind=pin.kind,
            price=pin.price,
            timeout_ms=timeout_ms,
            vcpu=pin.vcpu,
            memory_mb=pin.memory_mb,
        )
        attempts = (step.retry or RetryPolicy()).max_attempts
        items, items_from, note = foreach_items(routine, step, inputs)
        steps.append(
            StepCeiling(
                id=step.id,
                ref=pin.pin,
                tier=pin.kind,
                timeout_ms=timeout_ms,
                attempts=attempts,
                items=items,
                items_from=items_from,
                call=CallCeilingPublic(**one.as_dict()),
                ceiling_microusd=None if items is None else items * one.attempts(attempts),
                note=note,
            )
        )
    unbounded = [s.id for s in steps if s.ceiling_microusd is None]
    return RoutineEstimate(
        routine=routine.name,
        routine_hash=version,
        ceiling_microusd=None if unbounded else sum(s.ceiling_microusd or 0 for s in steps),
        unbounded=unbounded,
        steps=steps,
    )


def foreach_items(routine: Routine, step: Step, inputs: dict[str, Any]) -> tuple[int | None, str, str | None]:
    """How many calls each attempt round of a step makes at most: (items or None, where from, a note)."""
    foreach = step.foreach
    if foreach is None:
        return 1, "step", None
    if isinstance(foreach, list):
        return min(len(foreach), FOREACH_MAX_ITEMS), "literal", None
    expr = expressions.condition_expression(foreach)
    refs = expressions.references(expr)
    steps_read = sorted({r.path[0] for r in refs if r.root == "steps" and r.path})
    if steps_read:
        return (
            None,
            "unbounded",
            (
                f"foreach: {expressions.shown(expr)} reads steps.{steps_read[0]}: its list is known only "
                "when the run gets there"
            ),
        )
    missing = sorted({r.path[0] for r in refs if r.root == "inputs" and r.path and r.path[0] not in inputs})
    if not missing:
        try:
            items = expressions.evaluate_foreach(
                foreach, {"inputs": inputs, "steps": {}}, most=FOREACH_MAX_ITEMS
            )
        except (expressions.ExpressionError, expressions.TooManyItems) as exc:
            return 0, "failing", f"with these inputs the step fails before any call: {exc}"
        return len(items), "inputs", None
    whole = _INPUT.match(expr)
    spec = routine.inputs.get(missing[0]) if whole else None
    most = (spec.model_extra or {}).get("maxItems") if spec is not None else None
    if isinstance(most, int) and not isinstance(most, bool):
        return min(most, FOREACH_MAX_ITEMS), "max_items", None
    return (
        None,
        "unbounded",
        (
            f"foreach: {expressions.shown(expr)} reads inputs.{missing[0]}, which the estimate was not "
            "given and whose schema has no maxItems: give the input, or a maxItems"
        ),
    )
