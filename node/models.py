"""The wire models of `POST /v1/node/calls` (docs/internals.md, "Node <-> api")."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from packs.names import FILE_NAME_RE, PACK_ID_RE, SEMVER_RE

MAX_TIMEOUT_MS = 60_000
MAX_OUTPUT_FILE_BYTES = 256 * 1024
CALL_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
TENANT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class JsSpec(BaseModel):
    """What a js call runs (node/js/): the action's module and export, the errors it may name, the
    connections' non-secret params, and the grant its `fetch` requests are relayed with."""

    entry: str = Field(pattern=r"^js(/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){1,8}$")
    export: str = Field(pattern=r"^[A-Za-z_$][A-Za-z0-9_$]{0,63}$")
    errors: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    connections: dict[str, dict[str, Any]] = Field(default_factory=dict)
    grant: str = Field(default="", max_length=256 * 1024)


class NodeCall(BaseModel):
    """One tool call the api places on this node (a js action's when `js` is set: the node runs its
    runtime, and `cmd` is empty)."""

    call_id: str = Field(pattern=CALL_ID_RE.pattern)
    pack: str
    version: str
    action: str = Field(min_length=1, max_length=64)
    cmd: list[str] = Field(default_factory=list, max_length=64)
    js: JsSpec | None = None
    timeout_ms: int = Field(ge=1, le=MAX_TIMEOUT_MS)
    max_output_bytes: int = Field(default=MAX_OUTPUT_FILE_BYTES, ge=0, le=MAX_OUTPUT_FILE_BYTES)
    input: dict[str, Any] = Field(default_factory=dict)
    file_fields: list[str] = Field(default_factory=list)
    output_file_fields: list[str] | None = Field(
        default=None, description="the output properties declared as files (None: any {path} value)"
    )
    tenant: str | None = Field(
        default=None,
        pattern=TENANT_RE.pattern,
        description="calls of one tenant share one VM's CPU weight on the node (None: the call weighs alone)",
    )

    @field_validator("pack")
    @classmethod
    def _pack(cls, value: str) -> str:
        if PACK_ID_RE.match(value) is None:
            raise ValueError(f"pack {value!r} is not <namespace>/<name>")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if SEMVER_RE.match(value) is None:
            raise ValueError(f"version {value!r} is not an exact MAJOR.MINOR.PATCH version")
        return value

    @field_validator("cmd")
    @classmethod
    def _cmd(cls, value: list[str]) -> list[str]:
        if not value:
            return value
        first = value[0]
        if not first.startswith("/tool/") or ".." in first.split("/") or "\0" in "".join(value):
            raise ValueError(f"cmd[0] {first!r} is not a path under /tool/")
        return value

    @model_validator(mode="after")
    def _cmd_or_js(self) -> NodeCall:
        if bool(self.cmd) == (self.js is not None):
            raise ValueError("a call has either a cmd (a tool's) or js (a js action's), not both or neither")
        if self.js is not None and self.file_fields:
            raise ValueError("a js call takes no files")
        return self

    @field_validator("file_fields")
    @classmethod
    def _file_fields(cls, value: list[str]) -> list[str]:
        for name in value:
            if FILE_NAME_RE.match(name) is None:
                raise ValueError(f"file field {name!r} is not a name matching {FILE_NAME_RE.pattern}")
        return value


class NodeCallError(BaseModel):
    """Why a call failed: the seed's code, reason and detail fields."""

    model_config = {"extra": "allow"}

    code: str
    reason: str | None = None
    message: str


class NodeCallResult(BaseModel):
    """The node's answer to one call, for every outcome of the call itself."""

    ok: bool
    ran: bool
    output: dict[str, Any] | None = None
    error: NodeCallError | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    usage: dict[str, int] = Field(default_factory=lambda: {"vcpu_ms": 0, "gib_ms": 0})
    cancelled: bool = Field(default=False, description="the call was cancelled while the node held it")
    refreshed: list[dict[str, str]] = Field(
        default_factory=list, description="a js call's OAuth2 tokens the egress proxy refreshed, sealed"
    )
