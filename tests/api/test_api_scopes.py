"""The scope rule: wildcards grant everything except actions:tools:publish, which is held by name."""

from __future__ import annotations

import pytest

from api.accounts.scopes import covers, grants


@pytest.mark.parametrize(
    ("held", "needed", "granted"),
    [
        (["*"], "actions:call", True),
        (["*"], "keys:admin", True),
        (["*"], "actions:tools:publish", False),
        (["actions:*"], "actions:write", True),
        (["actions:*"], "actions:tools:publish", False),
        (["actions:*"], "routines:run", False),
        (["actions:tools:publish"], "actions:tools:publish", True),
        (["actions:tools:publish"], "actions:write", False),
        (["routines:read"], "routines:run", False),
        ([], "actions:call", False),
    ],
)
def test_grants(held: list[str], needed: str, granted: bool) -> None:
    assert grants(held, needed) is granted


def test_only_a_wildcard_covers_a_wildcard() -> None:
    assert covers(["*"], "actions:*") and not covers(["actions:call"], "actions:*")
    assert covers(["actions:*"], "actions:*") and not covers(["actions:*"], "*")
