"""The names an expression reads (`inputs`, `steps`, `item`, ...), converted to CEL once and only when read.

A `Scope` holds plain JSON data by top-level name. When an expression reads `inputs.names` or
`steps.fetch.output`, that member (`inputs.names`, `steps.fetch`) is converted to CEL the first time
and kept: a run converts each input and each step's result at most once, whatever number of
expressions read it, and never converts what no expression reads. A read of a whole name
(`size(inputs)`, `inputs[k]`) converts all of it. `with_names` makes the scope of one foreach item:
the item and index are its own, the rest is shared with (and converted once for) the step.

Deterministic: the conversion an evaluation pays for (counted in its Budget) depends only on the
evaluations before it in the same run, which a replay repeats in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from celpy import celtypes

from engine.cel_values import Budget, to_cel


class _Name:
    """One top-level name: its JSON value and what of it is converted so far."""

    __slots__ = ("cel", "value", "whole")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.cel: Any = None
        self.whole = False  # every member converted (or the value is not a map)

    def member(self, key: str, budget: Budget) -> None:
        if self.whole or not isinstance(self.value, dict):
            self.everything(budget)
            return
        if self.cel is None:
            self.cel = celtypes.MapType()
        if key in self.value:
            self._convert(key, budget)

    def everything(self, budget: Budget) -> None:
        if self.whole:
            return
        if isinstance(self.value, dict):
            if self.cel is None:
                self.cel = celtypes.MapType()
            for key in self.value:
                self._convert(key, budget)
        else:
            self.cel = to_cel(self.value, budget)
        self.whole = True

    def _convert(self, key: str, budget: Budget) -> None:
        name = celtypes.StringType(key)
        if name not in self.cel:
            budget.read(1)
            dict.__setitem__(self.cel, name, to_cel(self.value[key], budget, 1))


class Scope:
    """The names in scope of a run's expressions, converted to CEL lazily, once."""

    def __init__(self, names: Mapping[str, Any], parent: Scope | None = None) -> None:
        """Hold `names` (plain JSON data by name) over an optional parent scope's names."""
        self._names = {name: _Name(value) for name, value in names.items()}
        self._parent = parent

    def with_names(self, names: Mapping[str, Any]) -> Scope:
        """A scope with these names too (a foreach item's `item` and `index`), sharing this one's."""
        return Scope(names, parent=self)

    def set_member(self, name: str, key: str, value: Any) -> None:
        """Set `name.key` (a finished step: `steps.<id>` = `{"output", "status"}`)."""
        held = self._find(name)
        if held is None:
            held = self._names[name] = _Name({})
        if not isinstance(held.value, dict):
            held.value, held.cel, held.whole = {}, None, False
        held.value[key] = value
        held.whole = False
        if held.cel is not None:
            dict.pop(held.cel, celtypes.StringType(key), None)

    def value(self, name: str) -> Any:
        """The plain value of a name (None when absent)."""
        held = self._find(name)
        return None if held is None else held.value

    def values(self) -> dict[str, Any]:
        """Every name's plain value (a name of this scope over its parent's of the same name)."""
        out = {} if self._parent is None else self._parent.values()
        out.update((name, held.value) for name, held in self._names.items())
        return out

    def activation(self, reads: Iterable[tuple[str, str | None]], budget: Budget) -> dict[str, Any]:
        """CEL values of the names an expression reads, converting what it reads for the first time.

        Args:
            reads: `(name, member)` pairs; member None reads the whole name.
            budget: pays for what is converted now.

        Raises:
            BudgetExceeded: the conversion passes the budget's bound on values read.
        """
        out: dict[str, Any] = {}
        for name, member in reads:
            held = self._find(name)
            if held is None:
                continue  # the evaluator says `undeclared reference`
            if member is None:
                held.everything(budget)
            else:
                held.member(member, budget)
            out[name] = held.cel
        return out

    def _find(self, name: str) -> _Name | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope._names:
                return scope._names[name]
            scope = scope._parent
        return None
