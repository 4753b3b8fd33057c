"""Name patterns shared by the pack format: namespaces, packs, actions, key ids, file names, versions."""

from __future__ import annotations

import re

# A reverse-DNS namespace of at least two lowercase labels: "com.example.tools", "io.b3os".
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
NAMESPACE_RE = re.compile(rf"^{_LABEL}(?:\.{_LABEL})+$")
# A pack name or an action key: lowercase letters, digits and single hyphens inside. No "_", so that
# the MCP tool name "<pack>__<action>" stays unambiguous.
NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
PACK_ID_RE = re.compile(
    rf"^(?P<namespace>{_LABEL}(?:\.{_LABEL})+)/(?P<name>[a-z0-9](?:[a-z0-9-]{{0,62}}[a-z0-9])?)$"
)
SEMVER_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
MAJOR_RE = re.compile(r"^(0|[1-9][0-9]*)$")
# A key id: "<namespace>#<name>", such as "com.example.tools#dev-2026-10".
KID_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A file name, of a file value ({"$bytes", "name"}) and of each path segment in a pack bundle.
FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

NAMESPACE_HINT = (
    'lowercase dot-separated labels of letters, digits and hyphens, at least two, such as "com.example.tools"'
)
NAME_HINT = (
    "lowercase letters, digits and hyphens, 1 to 64 characters, starting and ending with a letter or digit"
)


def is_namespace(text: object) -> bool:
    """Whether `text` is a valid namespace such as "com.example.tools"."""
    return isinstance(text, str) and len(text) <= 253 and NAMESPACE_RE.match(text) is not None


def is_name(text: object) -> bool:
    """Whether `text` is a valid pack name or action key such as "search-places"."""
    return isinstance(text, str) and NAME_RE.match(text) is not None


def is_semver(text: object) -> bool:
    """Whether `text` is an exact version MAJOR.MINOR.PATCH without leading zeros."""
    return isinstance(text, str) and SEMVER_RE.match(text) is not None


def is_file_name(text: object) -> bool:
    """Whether `text` is an accepted file name (of a file value or a bundle path segment)."""
    return isinstance(text, str) and FILE_NAME_RE.match(text) is not None


def split_kid(kid: str) -> tuple[str, str]:
    """Split a key id "namespace#name" into its parts.

    Raises:
        ValueError: with a sentence naming the kid when it is not "<namespace>#<name>".
    """
    namespace, sep, name = kid.partition("#") if isinstance(kid, str) else ("", "", "")
    if not sep or not is_namespace(namespace) or KID_NAME_RE.match(name) is None:
        raise ValueError(
            f'key id {kid!r} is not accepted: use "<namespace>#<name>" '
            'such as "com.example.tools#dev-2026-10", '
            f"the namespace being {NAMESPACE_HINT} and the name of letters, digits, '.', '_' and '-'"
        )
    return namespace, name
