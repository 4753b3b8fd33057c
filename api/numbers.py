"""Integers as the OpenAPI document declares them: `Integral`.

JSON has one number type, and JSON Schema's `integer` (the type `/openapi.json` gives every count, size
and time limit) is any number without a fractional part, `5000.0` as much as `5000`. So a request field
declared integer takes both, as the integer they are (an idempotent request with either is the same
request), and still refuses `5000.5`, `true` and `"5000"`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, StrictInt


def integral(value: Any) -> Any:
    """`value` as an int when it is a float without a fractional part; anything else as it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integral = Annotated[StrictInt, BeforeValidator(integral)]
"""A strict integer that also takes a JSON number without a fractional part (`5000.0`). Bounds of a field
whose type is a union go before the validator (`Annotated[StrictInt, Field(ge=1), BeforeValidator(integral)]
| None`): given after it, pydantic writes them into the schema as `ge`, not `minimum`."""
