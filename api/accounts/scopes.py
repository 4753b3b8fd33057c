"""API key scopes and the rule that grants them.

A scope is `area:verb` (`actions:call`, `routines:run`, `keys:admin`) or deeper
(`actions:tools:publish`). A held `*` grants every scope and a held `area:*` every scope under
`area:`, EXCEPT the scopes in `BY_NAME_ONLY`, which are granted only when held by their exact name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SCOPE_PATTERN = re.compile(r"^(\*|[a-z][a-z0-9_-]*(:[a-z][a-z0-9_-]*)*(:\*)?)$")

ACTIONS_WRITE = "actions:write"
ACTIONS_CALL = "actions:call"
TOOLS_PUBLISH = "actions:tools:publish"
ROUTINES_RUN = "routines:run"
ROUTINES_READ = "routines:read"
KEYS_ADMIN = "keys:admin"
PUBLISHERS_ADMIN = "admin:publishers"
CONNECTIONS_WRITE = "connections:write"
CONNECTIONS_READ = "connections:read"
USAGE_READ = "usage:read"
EARNINGS_READ = "earnings:read"

KNOWN_SCOPES = (
    ACTIONS_WRITE,
    ACTIONS_CALL,
    TOOLS_PUBLISH,
    ROUTINES_RUN,
    ROUTINES_READ,
    KEYS_ADMIN,
    PUBLISHERS_ADMIN,
    CONNECTIONS_WRITE,
    CONNECTIONS_READ,
    USAGE_READ,
    EARNINGS_READ,
)
BY_NAME_ONLY = frozenset({TOOLS_PUBLISH})


def is_known(scope: str) -> bool:
    """Whether a scope names something b3os grants: a known scope, `*`, or `area:*` of a known area."""
    if scope == "*" or scope in KNOWN_SCOPES:
        return True
    return scope.endswith(":*") and any(known.startswith(scope[:-1]) for known in KNOWN_SCOPES)


OWNER_SCOPES = ["*", TOOLS_PUBLISH]


def grants(held: Iterable[str], needed: str) -> bool:
    """Whether the held scopes grant `needed` (wildcards never grant a by-name-only scope)."""
    held = list(held)
    if needed in held:
        return True
    if needed in BY_NAME_ONLY:
        return False
    for scope in held:
        if scope == "*":
            return True
        if scope.endswith(":*") and needed.startswith(scope[:-1]):
            return True
    return False


def covers(held: Iterable[str], wanted: str) -> bool:
    """Whether a key holding `held` may hand out a key holding `wanted` (no escalation)."""
    held = list(held)
    if wanted == "*":
        return "*" in held
    if wanted.endswith(":*"):
        return "*" in held or any(h.endswith(":*") and wanted.startswith(h[:-1]) for h in held)
    return grants(held, wanted)
