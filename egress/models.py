"""The wire models of the egress proxy: what the api POSTs to `/v1/egress/fetch`.

The api builds a `FetchRequest` from an action's evaluated request template (its `model_dump_json`
is the body to send; `body` is base64 in JSON) and reads back the answer described in docs/egress.md.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, StringConstraints, field_validator

MIB = 1024 * 1024
_TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"

HeaderName = Annotated[str, StringConstraints(pattern=_TOKEN, max_length=256)]
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[^\r\n\x00]*$", max_length=16384)]
Base64Body = Annotated[bytes, PlainSerializer(lambda raw: base64.b64encode(raw).decode(), return_type=str)]


class CredentialRef(BaseModel):
    """A sealed credential as the api sends it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=256)
    org_id: str = Field(min_length=1, max_length=256)
    sealed: str = Field(min_length=1, max_length=65536)


class FetchRequest(BaseModel):
    """The body of `POST /v1/egress/fetch`: a concrete request the api built from a template."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    url: str = Field(min_length=1, max_length=16384)
    headers: list[tuple[HeaderName, HeaderValue]] = Field(default_factory=list, max_length=256)
    body: Base64Body | None = Field(default=None, description="base64 in JSON")
    egress: list[str] = Field(max_length=256)
    credentials: list[CredentialRef] = Field(default_factory=list, max_length=32)
    timeout_ms: int = Field(default=30_000, ge=1, le=600_000)
    max_body_bytes: int = Field(default=MIB, ge=0, le=256 * MIB)
    max_redirects: int = Field(default=5, ge=0, le=20)

    @field_validator("body", mode="before")
    @classmethod
    def _base64(cls, value: Any) -> Any:
        if value is None or isinstance(value, bytes):
            return value  # raw bytes from Python; base64 text from JSON
        if not isinstance(value, str):
            raise ValueError("body must be base64 text or null")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("body is not base64") from None

    @field_validator("headers")
    @classmethod
    def _latin1(cls, value: list[tuple[str, str]]) -> list[tuple[str, str]]:
        for index, (_, text) in enumerate(value):
            try:
                text.encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(f"header {index} has a value that is not latin-1 text") from None
        return value
