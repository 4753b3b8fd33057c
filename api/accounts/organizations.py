"""Organizations and API keys: creation, lookup by secret, revocation.

A key's secret (`b3_` + 40 base62 characters) is shown once and stored only as its sha256 (the
secret has ~238 bits of entropy, so a fast hash is enough); its first 11 characters are kept as
the lookup prefix. CRUD functions take keyword-only arguments and do not commit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy import select as select_columns
from sqlmodel import Session, col, select

from api.errors import RateLimited
from api.models import ApiKey, Organization, utcnow
from api.rawsql import Reads

_ALPHABET = string.ascii_letters + string.digits
_ID_ALPHABET = string.ascii_lowercase + string.digits
_ID_CHARS = 20
_ID_SPACE = len(_ID_ALPHABET) ** _ID_CHARS
KEY_PREFIX = "b3_"
PREFIX_LEN = len(KEY_PREFIX) + 8


def new_id(kind: str) -> str:
    """A random id such as `org_01k3...` (kind + 20 lowercase alphanumerics, about 103 random bits): one
    number drawn from the system's random source, written in base 36 (every call takes one; drawing each
    character apart took 20 reads of it)."""
    number = secrets.randbelow(_ID_SPACE)
    chars = []
    for _ in range(_ID_CHARS):
        number, digit = divmod(number, len(_ID_ALPHABET))
        chars.append(_ID_ALPHABET[digit])
    return f"{kind}_" + "".join(chars)


def new_secret() -> str:
    """A fresh API key secret."""
    return KEY_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(40))


_KEY_SHAPE = re.compile(rf"^{KEY_PREFIX}[A-Za-z0-9]{{40}}$")


def is_key_shaped(secret: str) -> bool:
    """Whether `secret` has the shape of a key `new_secret` makes (no lookup: it may be no key)."""
    return _KEY_SHAPE.match(secret) is not None


def hash_secret(secret: str) -> str:
    """The stored form of a secret: sha256, lowercase hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def create_organization(session: Session, *, name: str, is_operator: bool = False) -> Organization:
    """Add an organization (the caller commits)."""
    org = Organization(id=new_id("org"), name=name, is_operator=is_operator)
    session.add(org)
    session.flush()
    return org


def create_api_key(
    session: Session,
    *,
    org_id: str,
    scopes: Sequence[str],
    name: str = "",
    monthly_spend_cap_microusd: int | None = None,
) -> tuple[ApiKey, str]:
    """Add a key to an organization; returns the row and the secret (shown once, never stored)."""
    secret = new_secret()
    key = ApiKey(
        id=new_id("key"),
        org_id=org_id,
        name=name,
        scopes=list(dict.fromkeys(scopes)),
        monthly_spend_cap_microusd=monthly_spend_cap_microusd,
        prefix=secret[:PREFIX_LEN],
        key_hash=hash_secret(secret),
    )
    session.add(key)
    session.flush()
    return key, secret


def find_key(session: Session, *, secret: str) -> ApiKey | None:
    """The key whose secret this is (revoked keys included), or None."""
    if not secret.startswith(KEY_PREFIX) or len(secret) < PREFIX_LEN + 1:
        return None
    key = session.exec(select(ApiKey).where(ApiKey.prefix == secret[:PREFIX_LEN])).first()
    if key is None or not hmac.compare_digest(key.key_hash, hash_secret(secret)):
        return None
    return key


@dataclass(frozen=True, slots=True)
class FoundKey:
    """What a request needs of the key it came with (`find_key_of_org`)."""

    id: str
    org_id: str
    scopes: list[str]
    monthly_spend_cap_microusd: int | None
    revoked_at: dt.datetime | None
    is_operator: bool
    """Whether the key's organization is the operator's."""


FOUND_KEY_COLUMNS = (
    col(ApiKey.id),
    col(ApiKey.org_id),
    col(ApiKey.scopes),
    col(ApiKey.monthly_spend_cap_microusd),
    col(ApiKey.revoked_at),
    col(Organization.is_operator),
)
"""The columns `found_key` reads, with `Organization` outer-joined on the key's organization."""

_KEY_OF_ORG = (
    select_columns(*FOUND_KEY_COLUMNS, col(ApiKey.key_hash))
    .outerjoin(Organization, col(Organization.id) == col(ApiKey.org_id))
    .where(col(ApiKey.prefix) == bindparam("prefix"))
)  # built once: every request reads it


def found_key(row: Any) -> FoundKey:
    """The `FoundKey` of a row holding `FOUND_KEY_COLUMNS`."""
    return FoundKey(
        id=row.id,
        org_id=row.org_id,
        scopes=list(row.scopes),
        monthly_spend_cap_microusd=row.monthly_spend_cap_microusd,
        revoked_at=row.revoked_at,
        is_operator=bool(row.is_operator),
    )


def find_key_of_org(reads: Reads, *, secret: str) -> FoundKey | None:
    """`find_key` (revoked keys included) and whether its organization is the operator's, in one query
    on the driver: every request asks, and SQLAlchemy's execution costs it more than the read itself
    (api.rawsql)."""
    if not secret.startswith(KEY_PREFIX) or len(secret) < PREFIX_LEN + 1:
        return None
    row = reads.run(_KEY_OF_ORG, {"prefix": secret[:PREFIX_LEN]}).first()
    if row is None or not hmac.compare_digest(row.key_hash, hash_secret(secret)):
        return None
    return found_key(row)


def list_api_keys(session: Session, *, org_id: str) -> list[ApiKey]:
    """An organization's keys, oldest first."""
    stmt = select(ApiKey).where(ApiKey.org_id == org_id).order_by(ApiKey.created_at, ApiKey.id)  # type: ignore[arg-type]
    return list(session.exec(stmt).all())


def get_api_key(session: Session, *, org_id: str, key_id: str) -> ApiKey | None:
    """One of an organization's keys (None for another organization's)."""
    key = session.get(ApiKey, key_id)
    return key if key is not None and key.org_id == org_id else None


def revoke_api_key(session: Session, *, key: ApiKey) -> ApiKey:
    """Mark a key revoked (idempotent: the first revocation time stays)."""
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.add(key)
        session.flush()
    return key


def check_key_creations(session: Session, *, org_id: str, per_hour: int) -> None:
    """Refuse a key past the organization's `per_hour` creations in the last hour (429, Retry-After)."""
    since = utcnow() - dt.timedelta(hours=1)
    made = session.exec(
        select(ApiKey.created_at)
        .where(col(ApiKey.org_id) == org_id, col(ApiKey.created_at) > since)
        .order_by(col(ApiKey.created_at))
    ).all()
    if len(made) >= per_hour:
        frees_at = made[len(made) - per_hour] + dt.timedelta(hours=1)
        raise RateLimited(
            f"This organization made {len(made)} API keys in the last hour, the most it may ({per_hour}).",
            retry_after=(frees_at - utcnow()).total_seconds(),
            details={"limit": per_hour},
        )
