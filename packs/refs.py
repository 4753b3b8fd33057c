"""Action refs: `ns/pack/action@1` pins a major version, `ns/pack/action@1.0.0` an exact one."""

from __future__ import annotations

from dataclasses import dataclass

from packs.errors import RefError
from packs.names import (
    MAJOR_RE,
    NAME_HINT,
    NAME_RE,
    NAMESPACE_HINT,
    NAMESPACE_RE,
    SEMVER_RE,
    is_name,
    is_namespace,
)

MAX_REF_LENGTH = 600  # a namespace of 253, two names of 64 and a version fit well within it


def _inner(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


# The ref as a regular expression (for JSON Schema): what `ActionRef.parse` accepts, less the lengths.
REF_PATTERN = (
    f"^{_inner(NAMESPACE_RE.pattern)}/{_inner(NAME_RE.pattern)}/{_inner(NAME_RE.pattern)}"
    f"@({_inner(MAJOR_RE.pattern)}|{_inner(SEMVER_RE.pattern)})$"
)
_FORM = (
    '"<namespace>/<pack>/<action>@<major>" or "@<major>.<minor>.<patch>", '
    'such as "com.example.tools/echo/echo@1"'
)


@dataclass(frozen=True)
class ActionRef:
    """A parsed action ref.

    Attributes:
        namespace: "com.example.tools".
        name: the pack's name inside its namespace, "echo".
        action: the action key, "echo".
        version: "1" (a major version: the newest installed 1.x.y) or "1.0.0" (exact).
    """

    namespace: str
    name: str
    action: str
    version: str

    @property
    def pack(self) -> str:
        """The pack id, "com.example.tools/echo"."""
        return f"{self.namespace}/{self.name}"

    @property
    def is_exact(self) -> bool:
        """Whether the ref pins one exact version rather than a major version."""
        return SEMVER_RE.match(self.version) is not None

    @property
    def major(self) -> int:
        """The major version the ref admits."""
        return int(self.version.split(".")[0])

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}/{self.action}@{self.version}"

    @classmethod
    def parse(cls, text: str) -> ActionRef:
        """Parse "ns/pack/action@1" or "ns/pack/action@1.0.0".

        Raises:
            RefError: with a sentence naming the ref and the part at fault.
        """
        if not isinstance(text, str) or not text:
            raise RefError(f"action ref {text!r} is not accepted: use {_FORM}")
        if len(text) > MAX_REF_LENGTH:
            raise RefError(f"action ref {text[:60]!r}... is longer than {MAX_REF_LENGTH} characters")
        body, at, version = text.partition("@")
        if not at:
            raise RefError(
                f"action ref {text!r} has no version: add @<major> or @<major>.<minor>.<patch>, "
                f'such as "{text}@1"'
            )
        parts = body.split("/")
        if len(parts) != 3:
            raise RefError(f"action ref {text!r} is not accepted: use {_FORM}")
        namespace, name, action = parts
        if not is_namespace(namespace):
            raise RefError(
                f"action ref {text!r}: namespace {namespace!r} is not accepted: use {NAMESPACE_HINT}"
            )
        if not is_name(name):
            raise RefError(f"action ref {text!r}: pack name {name!r} is not accepted: use {NAME_HINT}")
        if not is_name(action):
            raise RefError(f"action ref {text!r}: action key {action!r} is not accepted: use {NAME_HINT}")
        if MAJOR_RE.match(version) is None and SEMVER_RE.match(version) is None:
            raise RefError(
                f"action ref {text!r}: version {version!r} is not accepted: use a major version "
                'such as "1" or an exact version such as "1.0.0"'
            )
        return cls(namespace=namespace, name=name, action=action, version=version)
