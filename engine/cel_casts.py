"""cel-python's evaluator with cheap casts, for this engine only.

cel-python's evaluator spells `cast(Tuple[List[Result], Result], ...)` in every operator: typing then
hashes `Result`, a Union of twenty types, on each call (about 40% of an evaluation's time). `Result` is
read nowhere else at run time, so the methods and functions of `celpy.evaluation` that read it are
copied here with the module's names but `Result` bound to `Any`, which makes those casts cheap and
changes nothing else. cel-python itself is left as it is for any other caller in the process.

Deterministic, no I/O: the workflow runs this module (passed through its sandbox).
"""

from __future__ import annotations

from types import FunctionType
from typing import Any

import celpy.evaluation


def _reads_result(value: object) -> bool:
    return isinstance(value, FunctionType) and "Result" in value.__code__.co_names


_NAMES: dict[str, Any] = {**vars(celpy.evaluation), "Result": Any}
"""`celpy.evaluation`'s names as the copies read them: `Result` is `Any`, and each function that reads it
is its copy (so a copied method calling `macro_all` calls the cheap one)."""


def _copy(function: FunctionType) -> FunctionType:
    """`function` reading its module's names from `_NAMES`."""
    copy = FunctionType(
        function.__code__, _NAMES, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    copy.__doc__ = function.__doc__
    return copy


_NAMES.update({name: _copy(value) for name, value in vars(celpy.evaluation).items() if _reads_result(value)})

operator_in = _NAMES["operator_in"]
"""cel-python's `_in_` (a standard function, so found by the activation, not by name): its cheap copy."""


class Evaluator(celpy.evaluation.Evaluator):
    """cel-python's evaluator, each method that reads `Result` replaced by its cheap copy."""


for _name, _method in vars(celpy.evaluation.Evaluator).items():
    if _reads_result(_method):
        setattr(Evaluator, _name, _copy(_method))
