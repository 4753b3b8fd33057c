"""Path, query and header parameters that several routes share, with the rules the server checks declared.

The server checks these in code (with its own sentences), so the OpenAPI schema only declares the
rule (`json_schema_extra`) where FastAPI would otherwise answer in words of its own.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Path, Query

from api.calls.idempotency import MAX_KEY_LENGTH
from packs.names import NAME_RE, NAMESPACE_RE, SEMVER_RE

MAX_NAMESPACE_LENGTH = 200
# A month of usage or earnings: years 1000 to 2999, so that the month after it always exists.
MONTH_PATTERN = r"^[12][0-9]{3}-(0[1-9]|1[0-2])$"
# Printable ASCII (api.calls.idempotency.check_key); blanks around a header's value are not part of it.
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]([ -~]*[!-~])?$"


def _declared(**rules: Any) -> dict[str, Any]:
    return {"json_schema_extra": rules}


Namespace = Annotated[
    str,
    Path(
        description="a publisher namespace, reverse DNS such as com.example.tools",
        examples=["com.example.tools"],
        **_declared(pattern=NAMESPACE_RE.pattern, maxLength=MAX_NAMESPACE_LENGTH),
    ),
]
PackName = Annotated[
    str,
    Path(
        description="the pack's name, such as echo", examples=["echo"], **_declared(pattern=NAME_RE.pattern)
    ),
]
Version = Annotated[
    str,
    Path(
        description="an exact version MAJOR.MINOR.PATCH",
        examples=["1.0.0"],
        **_declared(pattern=SEMVER_RE.pattern),
    ),
]
Month = Annotated[
    str | None,
    Query(description="a month, YYYY-MM (default: this month)", **_declared(pattern=MONTH_PATTERN)),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description=f"1 to {MAX_KEY_LENGTH} printable ASCII characters: the same key and request, one answer",
        **_declared(pattern=IDEMPOTENCY_KEY_PATTERN, minLength=1, maxLength=MAX_KEY_LENGTH),
    ),
]
