"""Connections of an organization: checked, sealed to the egress proxy, stored, listed, removed.

Adding a connection checks, in order and before anything is written: the pack is in the registry;
its newest version declares the connection; `params` match the connection's `params` schema
(defaults filled in; no schema takes no params); `secret` has the shape of the connection's kind.
Then the secret is sealed with `egress.sealing.seal` to the proxy's public key, bound to the
organization and the row's id, as `{"kind", "hosts", "inject", "secret"}` (hosts and inject from
the manifest; the hosts are also stored in the clear and shown to the organization, so it sees where its
secret goes). Only the proxy can open it. Adding one the organization already has for that
(pack, connection) replaces its secret and params and keeps its id.

The public key is `B3OS_EGRESS_PUBLIC_KEY`, else asked once from `GET {B3OS_EGRESS_URL}/v1/egress/public-key`
(with `B3OS_EGRESS_TOKEN`) and kept for the life of the process; without either, adding answers
503. The secret and its sealed token appear in no error, answer or log line: errors about the
secret name the field and the shape the kind takes, never a value, and database errors are reported
without their statement parameters.

Functions take a Session and keyword-only arguments; the writing ones commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Session, col, select

from api.accounts.organizations import new_id
from api.calls.inputs import fill_defaults, schema_errors
from api.config import Settings
from api.connections.tables import SECRET_MAX_CHARS, ConnectionRecord
from api.errors import InvalidRequest, NotFound, ServiceUnavailable
from api.models import utcnow
from api.numbers import integral
from api.registry import catalog
from egress.sealing import PREFIX, SealError, connection_binding, load_public_key, seal
from packs.manifest import Connection

log = logging.getLogger("b3os.api.connections")

HINT_MIN_CHARS = 12
PUBLIC_KEY_PATH = "/v1/egress/public-key"
FETCH_TIMEOUT_S = 5.0
RETRY_UNCONFIGURED_S = 60
RETRY_UNREACHABLE_S = 5
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_OAUTH2_TEXTS = ("access_token", "refresh_token", "token_url", "client_id", "client_secret")
_TEXT = f"a text of 1 to {SECRET_MAX_CHARS} characters without control characters"
_TAKES = {
    "api_key": f"secret as {_TEXT}",
    "bearer": f"secret as {_TEXT}",
    "basic": f'secret as {{"username", "password"}}, each {_TEXT} (the username without ":")',
    "oauth2": 'secret as {"access_token", "refresh_token"?, "expires_at"?, "token_url"?, "client_id"?, '
    f'"client_secret"?}}: texts, each {_TEXT}, token_url an https URL, expires_at RFC 3339 or '
    "integer unix seconds",
}
NOT_CONFIGURED = (
    "The egress proxy is not configured, so no connection can be sealed: set B3OS_EGRESS_PUBLIC_KEY "
    "or B3OS_EGRESS_URL + B3OS_EGRESS_TOKEN on the api."
)


@dataclass(frozen=True)
class CheckedSecret:
    """A secret of the right shape: what is sealed (oauth2 `expires_at` as unix seconds) and its hint."""

    value: str | dict[str, Any]
    hint: str


# --- checks --------------------------------------------------------------------------------------


def declared_connection(session: Session, *, pack: str, connection: str) -> Connection:
    """The connection `connection` as the newest version of `pack` declares it, or NotFound naming it."""
    version = catalog.newest(session, pack=pack)
    if version is None:
        raise NotFound(f"There is no pack {pack[:300]} in the registry.", field="pack")
    raw = version.manifest.get("connections")
    declared = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    found = next((c for c in declared if c.get("key") == connection), None)
    if found is None:
        keys = ", ".join(str(c.get("key")) for c in declared)
        listed = f"its connections are {keys}" if keys else "it declares no connections"
        raise NotFound(
            f"The pack {pack} (version {version.version}) has no connection {connection[:200]}: {listed}.",
            field="connection",
        )
    try:
        return Connection.model_validate(found)
    except ValidationError:
        raise NotFound(
            f"The connection {connection} of the pack {pack} (version {version.version}) is not one this "
            "api can store: the manifest declares it in an unknown form.",
            field="connection",
        ) from None


def check_params(definition: Connection, params: dict[str, Any] | None) -> dict[str, Any]:
    """The connection's params with schema defaults filled in, or InvalidRequest naming the field."""
    params = {} if params is None else params
    if definition.params is None:
        if params:
            name = sorted(params)[0]
            raise InvalidRequest(
                f"The field params.{name[:100]} is not accepted: the connection {definition.key} takes "
                "no params.",
                field=f"params.{name[:100]}",
            )
        return {}
    filled: dict[str, Any] = fill_defaults(definition.params, params)
    errors = schema_errors(definition.params, filled, "params")
    if errors:
        first = errors[0]
        raise InvalidRequest(
            f"The field {first['path']} is invalid: {first['message']}.",
            field=first["path"],
            errors=errors,
        )
    return filled


def _refuse(kind: str, problem: str) -> InvalidRequest:
    article = "an" if kind[0] in "aeiou" else "a"
    return InvalidRequest(
        f"The field secret is not what {article} {kind} connection takes ({problem}): "
        f"it takes {_TAKES[kind]}.",
        field="secret",
    )


def _text(kind: str, value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _refuse(kind, f"{name} is {'absent' if value is None else 'not a text'}")
    if not 1 <= len(value) <= SECRET_MAX_CHARS:
        raise _refuse(kind, f"{name} has {len(value)} characters")
    if _CONTROL.search(value):
        raise _refuse(kind, f"{name} holds a control character")
    return value


def _expires_at(kind: str, value: Any) -> int:
    value = integral(value)  # 1767225600.0 is the integer the schema declares (api.numbers)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 2**53:
            raise _refuse(kind, "secret.expires_at is out of range")
        return value
    if isinstance(value, str) and _RFC3339.match(value):
        try:
            when = dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        except ValueError:
            raise _refuse(kind, "secret.expires_at is not a valid date and time") from None
        return int(when.timestamp())
    raise _refuse(kind, "secret.expires_at is neither RFC 3339 nor integer unix seconds")


def _hint(text: str) -> str:
    return text[-4:] if len(text) >= HINT_MIN_CHARS else ""


def check_secret(kind: str, secret: Any) -> CheckedSecret:
    """The secret if it has the shape `kind` takes, else InvalidRequest naming `secret` (never its value)."""
    if kind in ("api_key", "bearer"):
        text = _text(kind, secret, "secret")
        return CheckedSecret(value=text, hint=_hint(text))
    if not isinstance(secret, dict):
        raise _refuse(kind, "secret is not a JSON object")
    if kind == "basic":
        if set(secret) - {"username", "password"}:
            raise _refuse(kind, "secret has fields a basic connection does not take")
        username = _text(kind, secret.get("username"), "secret.username")
        password = _text(kind, secret.get("password"), "secret.password")
        if ":" in username:
            raise _refuse(kind, 'secret.username holds ":"')
        return CheckedSecret(value={"username": username, "password": password}, hint=_hint(password))
    if set(secret) - {*_OAUTH2_TEXTS, "expires_at"}:
        raise _refuse(kind, "secret has fields an oauth2 connection does not take")
    value: dict[str, Any] = {"access_token": _text(kind, secret.get("access_token"), "secret.access_token")}
    for name in _OAUTH2_TEXTS[1:]:
        if name in secret:
            value[name] = _text(kind, secret[name], f"secret.{name}")
    if "token_url" in value:
        url = urlsplit(value["token_url"])
        if url.scheme != "https" or not url.hostname:
            raise _refuse(kind, "secret.token_url is not an https URL")
    if "expires_at" in secret:
        value["expires_at"] = _expires_at(kind, secret["expires_at"])
    return CheckedSecret(value=value, hint=_hint(value["access_token"]))


# --- the egress proxy's public key ---------------------------------------------------------------

_fetched: dict[tuple[str, str], X25519PublicKey] = {}
_fetch_lock = threading.Lock()


def egress_public_key(settings: Settings) -> X25519PublicKey:
    """The proxy's public key: configured, or asked once from the proxy; ServiceUnavailable without one."""
    if settings.egress_public_key:
        try:
            return load_public_key(settings.egress_public_key)
        except SealError as exc:
            raise ServiceUnavailable(
                f"B3OS_EGRESS_PUBLIC_KEY is not usable ({exc}): "
                "set the proxy's base64 raw X25519 public key.",
                retry_after_s=RETRY_UNCONFIGURED_S,
            ) from None
    if not (settings.egress_url and settings.egress_token):
        raise ServiceUnavailable(NOT_CONFIGURED, retry_after_s=RETRY_UNCONFIGURED_S)
    url, token = settings.egress_url.rstrip("/"), settings.egress_token
    with _fetch_lock:
        key = _fetched.get((url, token))
        if key is None:
            key = _fetch_public_key(url, token)
            _fetched[(url, token)] = key
        return key


def _fetch_public_key(url: str, token: str) -> X25519PublicKey:
    def unavailable(why: str) -> ServiceUnavailable:
        log.warning("egress public key from %s: %s", url, why)
        return ServiceUnavailable(
            f"The egress proxy at {url} did not give its public key ({why}), so no connection can be "
            "sealed: check B3OS_EGRESS_URL and B3OS_EGRESS_TOKEN.",
            retry_after_s=RETRY_UNREACHABLE_S,
        )

    try:
        response = httpx.get(
            url + PUBLIC_KEY_PATH, headers={"Authorization": f"Bearer {token}"}, timeout=FETCH_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        raise unavailable(type(exc).__name__) from None
    if response.status_code != 200:
        raise unavailable(f"it answered {response.status_code}")
    try:
        text = response.json().get("public_key")
        return load_public_key(text)
    except (ValueError, AttributeError, SealError):
        raise unavailable('its answer holds no usable {"public_key"}') from None


# --- rows ----------------------------------------------------------------------------------------


@contextmanager
def _quiet_db_errors(session: Session, what: str) -> Iterator[None]:
    """Database errors without their parameters (which hold sealed tokens) in any message or log line."""
    try:
        yield
    except SQLAlchemyError as exc:
        session.rollback()
        log.error("%s failed: %s", what, type(exc).__name__)
        raise ServiceUnavailable(f"The database failed to {what}; try again.", retry_after_s=1) from None


def add_connection(
    session: Session,
    *,
    settings: Settings,
    org_id: str,
    pack: str,
    connection: str,
    params: dict[str, Any] | None,
    secret: Any,
) -> ConnectionRecord:
    """Check, seal and store (or replace) an organization's connection; commits.

    Every check runs before anything is written; the read transaction is ended before the proxy may
    be asked for its key (the session must have nothing pending).

    Raises:
        NotFound: the pack is not in the registry, or its newest version lacks the connection.
        InvalidRequest: the params fail the connection's schema, or the secret has the wrong shape.
        ServiceUnavailable: the egress proxy's key is unknown, or the database failed.
    """
    definition = declared_connection(session, pack=pack, connection=connection)
    checked_params = check_params(definition, params)
    checked = check_secret(definition.kind, secret)
    payload = {"kind": definition.kind, "hosts": definition.hosts, "inject": definition.inject}
    session.rollback()
    public_key = egress_public_key(settings)
    for _ in range(2):
        with _quiet_db_errors(session, "store the connection"):
            row = get_by_key(session, org_id=org_id, pack=pack, connection=connection)
            now = utcnow()
            if row is None:
                row = ConnectionRecord(
                    id=new_id("conn"),
                    org_id=org_id,
                    pack=pack,
                    connection=connection,
                    kind=definition.kind,
                    sealed="",
                    created_at=now,
                )
            row.kind = definition.kind
            row.params = checked_params
            row.hosts = list(definition.hosts)
            row.hint = checked.hint
            row.sealed = seal(
                public_key, {**payload, "secret": checked.value}, binding=connection_binding(org_id, row.id)
            )
            row.updated_at = now
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()  # a concurrent add of the same connection won: replace its secret
                continue
            return row
    raise ServiceUnavailable("The connection changed while it was stored; try again.", retry_after_s=1)


def get_by_key(session: Session, *, org_id: str, pack: str, connection: str) -> ConnectionRecord | None:
    """The organization's connection for (pack, connection key), or None."""
    stmt = select(ConnectionRecord).where(
        ConnectionRecord.org_id == org_id,
        ConnectionRecord.pack == pack,
        ConnectionRecord.connection == connection,
    )
    return session.exec(stmt).first()


def get_connection(session: Session, *, org_id: str, connection_id: str) -> ConnectionRecord | None:
    """The organization's connection of that id, or None (also when another organization's)."""
    row = session.get(ConnectionRecord, connection_id)
    return row if row is not None and row.org_id == org_id else None


def list_connections(session: Session, *, org_id: str) -> list[ConnectionRecord]:
    """The organization's connections, by pack then connection key."""
    stmt = (
        select(ConnectionRecord)
        .where(ConnectionRecord.org_id == org_id)
        .order_by(col(ConnectionRecord.pack), col(ConnectionRecord.connection))
    )
    return list(session.exec(stmt).all())


def delete_connection(session: Session, *, org_id: str, connection_id: str) -> bool:
    """Remove the organization's connection of that id; commits. False when it has none."""
    row = get_connection(session, org_id=org_id, connection_id=connection_id)
    if row is None:
        return False
    with _quiet_db_errors(session, "remove the connection"):
        session.delete(row)
        session.commit()
    return True


def connections_for(session: Session, *, org_id: str, pack: str) -> dict[str, ConnectionRecord]:
    """The organization's connections of one pack, by connection key (for the call path)."""
    stmt = select(ConnectionRecord).where(ConnectionRecord.org_id == org_id, ConnectionRecord.pack == pack)
    return {row.connection: row for row in session.exec(stmt).all()}


def replace_sealed(
    session: Session, *, org_id: str, connection_id: str, old_sealed: str, new_sealed: str
) -> bool:
    """Compare-and-set the sealed token (the proxy refreshed an OAuth2 token); commits.

    Returns:
        True when the row still held `old_sealed` and now holds `new_sealed`; False when the
        connection is gone or was replaced meanwhile (the newer secret wins).

    Raises:
        ValueError: `new_sealed` is not a sealed token.
    """
    if not new_sealed.startswith(PREFIX):
        raise ValueError(f"new_sealed is not a {PREFIX.rstrip('.')} token")
    stmt = (
        update(ConnectionRecord)
        .where(
            col(ConnectionRecord.org_id) == org_id,
            col(ConnectionRecord.id) == connection_id,
            col(ConnectionRecord.sealed) == old_sealed,
        )
        .values(sealed=new_sealed, updated_at=utcnow())
    )
    with _quiet_db_errors(session, "store the refreshed connection"):
        result = session.exec(stmt)
        session.commit()
    return result.rowcount == 1
