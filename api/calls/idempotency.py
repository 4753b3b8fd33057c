"""Idempotency-Key: one answer per (organization, key), kept at least 24 hours, across api processes.

A request with a key first claims the key by INSERTing its row; the database's primary key makes
exactly one claimant win, whatever process it runs in. Then:

- same key, same request, answer stored: the stored status and body are answered again (with
  `Idempotent-Replayed: true`), and nothing runs or is charged again;
- same key, a different request (ref, input or timeout_ms): `422 idempotency_key_reused`;
- same key while the first request still runs: the second one WAITS for the first and answers its
  answer (a routine step's retry then gets the answer of the call its first attempt started). If the
  first claimant died (its claim passed `claimed_until`), the waiter takes the claim over and runs
  the call itself; a waiter that would wait past its own bound gets `409 idempotency_in_progress`
  with Retry-After.

Answers that say "try again" are not stored: 429 and 503 (nothing ran, nothing was billed) and a
`tool_failed` whose tool said `retryable: true` (it ran and was charged once; the retry it asks for
is a new run). The claim is released, so the retry the answer asks for really runs. Every other
answer is stored, in the same transaction that records the call's charge, and replayed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

import rfc8785
from sqlalchemy import bindparam, delete, insert, update
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from api import rawsql
from api.calls.errors import CallInvalid, IdempotencyKeyReused
from api.calls.tables import DONE, RUNNING, IdempotencyRecord
from api.rawsql import Transaction

MAX_KEY_LENGTH = 255
NOT_STORED = frozenset({429, 503})


def is_stored(status: int, body: dict[str, Any]) -> bool:
    """Whether an answer is final, and so kept under its Idempotency-Key and replayed.

    Answers that ask for a retry are not: 429, 503, a tool error the tool called retryable and an HTTP
    action's pack error the pack called retryable.
    """
    if status in NOT_STORED:
        return False
    error = body.get("error")
    if not isinstance(error, dict):
        return True
    return not (error.get("code") in ("tool_failed", "action_failed") and error.get("retryable") is True)


@dataclass(frozen=True)
class Claim:
    """The outcome of one attempt to claim a key.

    Exactly one of: `owner` (run the call), `replay` (status, body), or `wait_until` (someone runs it).
    """

    owner: bool = False
    replay: tuple[int, dict[str, Any]] | None = None
    wait_until: dt.datetime | None = None


_RECORDS = IdempotencyRecord.__table__  # type: ignore[attr-defined]
_THIS = (_RECORDS.c.org_id == bindparam("b_org"), _RECORDS.c.key == bindparam("b_key"))
# Built once and run on the session's connection by the driver (api.rawsql): a keyed call (every
# routine step's) runs them.
_CLAIM = insert(_RECORDS)
_STORE = (
    update(_RECORDS)
    .where(*_THIS)
    .values(state=DONE, status=bindparam("b_status"), body=bindparam("b_body"), call_id=bindparam("b_call"))
)
_LINK = update(_RECORDS).where(*_THIS, _RECORDS.c.state == RUNNING).values(call_id=bindparam("b_call"))
_RELEASE = delete(_RECORDS).where(*_THIS, _RECORDS.c.state == RUNNING)
# when a claim is refused: the key's row, then either its expired row dropped or its lapsed claim taken over
_FIND = sa_select(
    _RECORDS.c.request_hash,
    _RECORDS.c.state,
    _RECORDS.c.status,
    _RECORDS.c.body,
    _RECORDS.c.claimed_until,
    _RECORDS.c.expires_at,
).where(*_THIS)
_DROP_EXPIRED = delete(_RECORDS).where(*_THIS, _RECORDS.c.expires_at <= bindparam("b_now"))
_TAKE_OVER = (
    update(_RECORDS)
    .where(*_THIS, _RECORDS.c.state == RUNNING, _RECORDS.c.claimed_until == bindparam("b_lapsed"))
    .values(claimed_until=bindparam("b_until"))
)


def check_key(key: str) -> str:
    """Refuse a key that is not 1 to 255 printable ASCII characters with `400 invalid_request`.

    That is the sf-string of the IETF Idempotency-Key header draft, which every HTTP client can send.
    """
    if not key or len(key) > MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        raise CallInvalid(
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, not {key[:40]!r}",
            details={"field": "Idempotency-Key"},
        )
    return key


def request_hash(payload: dict[str, Any]) -> str:
    """A hash of the request (RFC 8785 canonical JSON), so equal requests match however they were spelled."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def try_claim(
    session: Transaction, *, org_id: str, key: str, digest: str, now: dt.datetime, hold_s: float, ttl_s: int
) -> Claim:
    """Claim a key, or learn its stored answer or how long its holder may still run (commits).

    Raises:
        IdempotencyKeyReused: the key was used for a different request.
    """
    claim = _attempt(session, org_id=org_id, key=key, digest=digest, now=now, hold_s=hold_s, ttl_s=ttl_s)
    if claim is None:  # the row was released or expired meanwhile: one more INSERT decides
        claim = _attempt(session, org_id=org_id, key=key, digest=digest, now=now, hold_s=hold_s, ttl_s=ttl_s)
    return claim or Claim(wait_until=now)


def _attempt(
    session: Transaction, *, org_id: str, key: str, digest: str, now: dt.datetime, hold_s: float, ttl_s: int
) -> Claim | None:
    claim = {
        "org_id": org_id,
        "key": key,
        "request_hash": digest,
        "state": RUNNING,
        "claimed_until": now + dt.timedelta(seconds=hold_s),
        "created_at": now,
        "expires_at": now + dt.timedelta(seconds=ttl_s),
    }
    try:
        rawsql.execute(session, _CLAIM, claim)
        session.commit()
        return Claim(owner=True)
    except IntegrityError:
        session.rollback()
    this = {"b_org": org_id, "b_key": key}
    try:
        found = rawsql.execute(session, _FIND, this).first()
        if found is None:
            return None
        if found.expires_at <= now:
            rawsql.execute(session, _DROP_EXPIRED, {**this, "b_now": now})
            session.commit()
            return None
        if found.request_hash != digest:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {key!r} was already used for a different request (another ref, input or "
                "timeout_ms); use a new key for a new request",
                details={"field": "Idempotency-Key"},
            )
        if found.state == DONE and found.status is not None and found.body is not None:
            return Claim(replay=(found.status, found.body))
        if found.claimed_until > now:
            return Claim(wait_until=found.claimed_until)
        until = now + dt.timedelta(seconds=hold_s)
        taken = rawsql.execute(
            session, _TAKE_OVER, {**this, "b_lapsed": found.claimed_until, "b_until": until}
        )
        session.commit()
        return Claim(owner=True) if taken.rowcount == 1 else Claim(wait_until=now)
    except BaseException:
        session.rollback()
        raise


def store(
    session: Transaction, *, org_id: str, key: str, status: int, body: dict[str, Any], call_id: str | None
) -> None:
    """Store the answer of a claimed key in the caller's transaction (which commits)."""
    params = {"b_org": org_id, "b_key": key, "b_status": status, "b_body": body, "b_call": call_id}
    rawsql.execute(session, _STORE, params)


def link_call(session: Transaction, *, org_id: str, key: str, call_id: str) -> None:
    """Name the admitted call of a running claim (in the caller's transaction), so a cancel finds it."""
    rawsql.execute(session, _LINK, {"b_org": org_id, "b_key": key, "b_call": call_id})


def release(session: Transaction, *, org_id: str, key: str) -> None:
    """Drop the claim of a key whose answer is not stored (429, 503) in the caller's transaction."""
    rawsql.execute(session, _RELEASE, {"b_org": org_id, "b_key": key})


def purge(session: Session, *, now: dt.datetime) -> int:
    """Delete stored answers past their expiry (commits); returns how many."""
    result = session.execute(delete(IdempotencyRecord).where(col(IdempotencyRecord.expires_at) <= now))
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]
