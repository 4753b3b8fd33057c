"""Connection credentials: opening sealed tokens, and where each one goes on a request.

A sealed token opens (egress.sealing) to `{"kind", "hosts", "inject", "secret"}`. A credential is
added to a request only when the request's host matches its sealed `hosts`: api_key into the header
or query parameter `inject` names, bearer and oauth2 as `Authorization: Bearer`, basic as
`Authorization: Basic base64(user:pass)`. Nothing here puts a secret into an error message.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import httpx
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from egress.errors import EgressError
from egress.sealing import SealError, connection_binding, open_sealed
from packs.manifest import host_allowed

_HEADER_SAFE = re.compile(r"^[^\r\n\x00]*$")


class BasicSecret(BaseModel):
    """The secret of a basic credential."""

    model_config = ConfigDict(extra="allow")

    username: str
    password: str


class OAuth2Secret(BaseModel):
    """The secret of an oauth2 credential; `expires_at` is RFC 3339 text or unix seconds."""

    model_config = ConfigDict(extra="allow")

    access_token: str
    refresh_token: str | None = None
    expires_at: str | float | None = None
    token_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = None

    def expires_at_unix(self) -> float | None:
        """`expires_at` as unix seconds, or None when absent or unreadable (then it never expires)."""
        value = self.expires_at
        if value is None or isinstance(value, float | int):
            return value
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None


class Payload(BaseModel):
    """A sealed credential's plaintext."""

    kind: Literal["api_key", "bearer", "basic", "oauth2"]
    hosts: list[str]
    inject: dict[str, str] | None = None
    secret: str | BasicSecret | OAuth2Secret

    @model_validator(mode="before")
    @classmethod
    def _secret_by_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("secret"), dict):
            kind, secret = data.get("kind"), data["secret"]
            if kind == "basic":
                data = {**data, "secret": BasicSecret.model_validate(secret)}
            elif kind == "oauth2":
                data = {**data, "secret": OAuth2Secret.model_validate(secret)}
        return data

    @model_validator(mode="after")
    def _shape(self) -> Payload:
        expected = {"api_key": str, "bearer": str, "basic": BasicSecret, "oauth2": OAuth2Secret}[self.kind]
        if not isinstance(self.secret, expected):
            raise ValueError(f"a {self.kind} secret has the wrong shape")
        if self.kind == "api_key":
            where = list(self.inject or {})
            if where not in (["header"], ["query"]):
                raise ValueError('an api_key needs inject {"header": NAME} or {"query": NAME}')
        self.hosts = [h.lower() for h in self.hosts]
        return self


@dataclass
class Credential:
    """One opened credential of one request; `payload` and `sealed` change when it is refreshed."""

    id: str
    org_id: str
    sealed: str
    payload: Payload

    @property
    def binding(self) -> str:
        """The sealing binding of this connection."""
        return connection_binding(self.org_id, self.id)

    def applies_to(self, host: str) -> bool:
        """Whether this credential goes on requests to `host`."""
        return host_allowed(host.lower(), self.payload.hosts)

    @property
    def header(self) -> str | None:
        """The header it injects (lowercase), or None when it goes in the query."""
        if self.payload.kind != "api_key":
            return "authorization"
        assert self.payload.inject is not None
        return self.payload.inject["header"].lower() if "header" in self.payload.inject else None

    @property
    def query(self) -> str | None:
        """The query parameter it injects, or None."""
        inject = self.payload.inject
        return inject["query"] if self.payload.kind == "api_key" and inject and "query" in inject else None

    def value(self) -> str:
        """The header or query value carrying the secret."""
        secret = self.payload.secret
        if isinstance(secret, BasicSecret):
            pair = f"{secret.username}:{secret.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        if isinstance(secret, OAuth2Secret):
            return f"Bearer {secret.access_token}"
        return secret if self.payload.kind == "api_key" else f"Bearer {secret}"


def open_credential(key: X25519PrivateKey, *, id: str, org_id: str, sealed: str) -> Credential:
    """Open one sealed credential of a request.

    Raises:
        EgressError: reason `credential`: the token does not open for this org and connection, or its
            payload is not a credential.
    """
    try:
        raw = open_sealed(key, sealed, binding=connection_binding(org_id, id))
    except SealError:
        raise EgressError(
            "credential",
            f"the credential {id} does not open with this proxy's key for organization {org_id}",
        ) from None
    try:
        payload = Payload.model_validate(raw)
    except ValidationError as exc:  # its text would quote the secret: keep only where it failed
        where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "payload"
        message = f"the credential {id} is not a valid credential (at {where})"
        raise EgressError("credential", message) from None
    credential = Credential(id=id, org_id=org_id, sealed=sealed, payload=payload)
    if credential.header is not None and not _HEADER_SAFE.match(credential.value()):
        raise EgressError("credential", f"the credential {id} has a secret that cannot go in a header")
    return credential


def check_conflicts(headers: list[tuple[str, str]], url: httpx.URL, credentials: list[Credential]) -> None:
    """Refuse a request whose own headers or query set a name a credential injects.

    Raises:
        EgressError: reason `credential_conflict`, naming the header or parameter and the credential.
    """
    names = {name.lower() for name, _ in headers}
    params = set(url.params.keys())
    for credential in credentials:
        if credential.header is not None and credential.header in names:
            raise EgressError(
                "credential_conflict",
                f"the request sets the header {credential.header}, which credential {credential.id} injects",
            )
        if credential.query is not None and credential.query in params:
            raise EgressError(
                "credential_conflict",
                f"the request sets the query parameter {credential.query}, "
                f"which credential {credential.id} injects",
            )


def strip_injected(url: httpx.URL, credentials: list[Credential]) -> httpx.URL:
    """`url` without any query parameter a credential injects (an upstream may echo it in a redirect)."""
    for credential in credentials:
        if credential.query is not None and credential.query in url.params:
            url = url.copy_remove_param(credential.query)
    return url


def inject(
    headers: list[tuple[str, str]], url: httpx.URL, credentials: list[Credential]
) -> tuple[list[tuple[str, str]], httpx.URL, list[Credential]]:
    """Add the credentials that apply to `url`'s host.

    Returns:
        The headers and URL to send, and the credentials they carry.

    Raises:
        EgressError: reason `credential_conflict`: two credentials set the same header or parameter.
    """
    host = url.raw_host.decode("ascii")
    carried = [c for c in credentials if c.applies_to(host)]
    places: dict[str, str] = {}
    for credential in carried:
        place = f"header {credential.header}" if credential.header else f"query parameter {credential.query}"
        if place in places:
            raise EgressError(
                "credential_conflict",
                f"credentials {places[place]} and {credential.id} both set the {place} on {host}",
            )
        places[place] = credential.id
    headers = list(headers)
    for credential in carried:
        if credential.header is not None:
            headers.append((credential.header, credential.value()))
        elif credential.query is not None:
            url = url.copy_set_param(credential.query, credential.value())
    return headers, url, carried
