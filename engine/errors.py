"""The routine engine's errors, under one root, so that callers can catch everything it raises at once.

    EngineError
    ├── RoutineError             a routine file has problems, each at file:line:column (engine.validate)
    ├── RoutineInputError        a run's inputs do not fit the routine (engine.run_inputs)
    ├── ExpressionError          an expression could not be evaluated (engine.expressions)
    │   └── ExpressionSyntaxError  an expression does not parse, or its shape passes a cap
    └── PayloadError             a value cannot travel through Temporal (engine.payloads)

A `uses:` that names no pack, version or action is the pack format's `packs.resolve.ResolveError`.
Inside the workflow only Temporal's `ApplicationError` fails a run; these never leave it.
"""

from __future__ import annotations


class EngineError(Exception):
    """The root of every error the routine engine raises."""
