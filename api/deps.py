"""Request dependencies: settings, session, checkers, and who is calling.

An API key arrives as `Authorization: Bearer b3_...` and becomes a `Principal` (key id, org,
scopes). `require(scope, ...)` checks scopes with `api.scopes.grants`. A node presents its own
credential (`b3n_...`, api.accounts.node_credentials) instead and becomes a `NodeCaller` of that node id.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Request
from sqlmodel import Session

from api.accounts.auth_limit import AuthLimiter
from api.accounts.node_credentials import find_credential
from api.accounts.organizations import FoundKey, find_key_of_org, is_key_shaped
from api.accounts.scopes import BY_NAME_ONLY, grants
from api.checker import Checkers
from api.config import Settings, get_settings
from api.db import get_read_session, get_session, run_reading
from api.errors import Forbidden, Unauthorized
from api.models import NodeCredential
from api.rawsql import Reads
from node.credential import is_node_secret

SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_checkers(request: Request) -> Checkers:
    """The app's checker processes (api.checker)."""
    checkers: Checkers = request.app.state.checkers
    return checkers


CheckersDep = Annotated[Checkers, Depends(get_checkers)]


@dataclass(frozen=True)
class Principal:
    """The API key behind a request."""

    key_id: str
    org_id: str
    scopes: tuple[str, ...]
    is_operator: bool

    def has(self, scope: str) -> bool:
        """Whether this key holds `scope` (wildcards do not grant by-name-only scopes)."""
        return grants(self.scopes, scope)

    def check(self, *scopes: str) -> None:
        """Raise Forbidden naming the first scope this key lacks."""
        for scope in scopes:
            if not self.has(scope):
                raise Forbidden(_missing_scope(scope), missing_scope=scope)


@dataclass(frozen=True)
class NodeCaller:
    """A node, authenticated by its own credential."""

    node_id: str


def _missing_scope(scope: str) -> str:
    if scope in BY_NAME_ONLY:
        return (
            f"This key lacks the scope {scope}, which must be held by name (* and actions:* do not grant it)."
        )
    return f"This key lacks the scope {scope}."


def bearer_token(request: Request) -> str:
    """The bearer token of a request, or Unauthorized."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Send an API key as the header Authorization: Bearer <key>.")
    return token.strip()


class _Revocable(Protocol):
    @property
    def revoked_at(self) -> dt.datetime | None: ...


R = TypeVar("R", bound=_Revocable)


def _authenticated(
    request: Request,
    token: str,
    find: Callable[[], R | None],
    *,
    invalid: str,
    revoked: Callable[[R], str],
    shaped: Callable[[str], bool] = lambda _: False,
) -> R:
    """What `find` found for `token`, each try counted by the app's auth limiter. From an address past its
    failures, only a token `shaped` like one the api issues (or seen valid) is looked up at all.

    Raises:
        Unauthorized: `invalid` when nothing was found, `revoked(found)` when it was revoked.
        RateLimited: the address is past its failures and the token is not a valid key.
    """
    limiter: AuthLimiter = request.app.state.auth_limiter
    address = request.client.host if request.client else "unknown"
    refusal = limiter.refusal(address, token)
    if refusal is not None and not shaped(token):
        raise refusal
    found = find()
    if found is None or found.revoked_at is not None:
        limiter.failed(address)
        if refusal is not None:
            raise refusal
        raise Unauthorized(invalid if found is None else revoked(found))
    limiter.succeeded(token)
    return found


def _principal_for(request: Request, token: str) -> Principal:
    def find() -> FoundKey | None:
        # A connection of its own, closed at once: the request's session must not hold a transaction
        # (on SQLite, a write lock) for the whole request just because the key was looked up.
        with Reads(request.app.state.engine) as reads:
            return find_key_of_org(reads, secret=token)

    key = _authenticated(
        request,
        token,
        find,
        invalid="The API key is not valid.",
        revoked=lambda _: "This API key was revoked.",
        shaped=is_key_shaped,
    )
    request.state.api_key = key  # the call surfaces read it again (api.calls.auth): no second lookup
    return Principal(key_id=key.id, org_id=key.org_id, scopes=tuple(key.scopes), is_operator=key.is_operator)


def principal_of(request: Request) -> Principal:
    """The API key calling (any scope), from code that may read the database where it runs."""
    return _principal_for(request, bearer_token(request))


async def current_principal(request: Request) -> Principal:
    """The API key calling (any scope): a dependency, its read where `api.db.run_reading` puts reads
    (on SQLite the event loop: a sync dependency would cost a thread hop on every request)."""
    return await run_reading(request.app.state.engine, lambda: principal_of(request))


PrincipalDep = Annotated[Principal, Depends(current_principal)]


def require(*scopes: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the calling key, which must hold every one of `scopes`."""

    async def dependency(principal: PrincipalDep) -> Principal:
        principal.check(*scopes)
        return principal

    return dependency


def _node_for(request: Request, token: str) -> NodeCaller:
    def find() -> NodeCredential | None:
        with Session(request.app.state.engine) as session:
            return find_credential(session, secret=token)

    credential = _authenticated(
        request,
        token,
        find,
        invalid="The node credential is not valid (issue one with b3os node credential issue).",
        revoked=lambda c: f"The credential of node {c.node_id} was revoked.",
    )
    return NodeCaller(node_id=credential.node_id)


def node_caller(request: Request) -> NodeCaller:
    """A node (by its own credential), or Unauthorized."""
    return _node_for(request, bearer_token(request))


def principal_or_node(request: Request) -> Principal | NodeCaller:
    """A node (by its credential) or an API key."""
    token = bearer_token(request)
    if is_node_secret(token):
        return _node_for(request, token)
    return _principal_for(request, token)
