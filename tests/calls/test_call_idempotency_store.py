"""The idempotency store on SQLite and PostgreSQL: one claimant, answers kept 24 hours, then purged."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from api.calls import idempotency
from api.calls.errors import IdempotencyKeyReused
from api.models import utcnow

DAY = 86_400


@pytest.fixture
def engine(migrated_engine: Engine) -> Engine:  # noqa: F811
    return migrated_engine


def _claim(engine: Engine, now: dt.datetime, digest: str = "sha256:a") -> idempotency.Claim:
    with Session(engine) as session:
        return idempotency.try_claim(
            session, org_id="org", key="k", digest=digest, now=now, hold_s=90, ttl_s=DAY
        )


def _store(engine: Engine) -> None:
    with Session(engine) as session:
        idempotency.store(session, org_id="org", key="k", status=200, body={"output": 1}, call_id="tcall_1")
        session.commit()


def test_exactly_one_of_many_concurrent_claimants_owns_the_key(engine: Engine) -> None:
    now = utcnow()
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda _: _claim(engine, now), range(8)))
    assert sum(c.owner for c in claims) == 1
    assert all(c.wait_until == now + dt.timedelta(seconds=90) for c in claims if not c.owner)


def test_a_stored_answer_is_replayed_for_24_hours_then_the_key_is_new(engine: Engine) -> None:
    now = utcnow()
    assert _claim(engine, now).owner
    _store(engine)
    assert _claim(engine, now + dt.timedelta(seconds=DAY - 1)).replay == (200, {"output": 1})
    with pytest.raises(IdempotencyKeyReused):
        _claim(engine, now + dt.timedelta(hours=1), digest="sha256:b")
    with Session(engine) as session:
        assert idempotency.purge(session, now=now + dt.timedelta(seconds=DAY - 1)) == 0
    assert _claim(engine, now + dt.timedelta(seconds=DAY)).owner  # expired: the key starts afresh


def test_a_claim_whose_holder_died_is_taken_over_once(engine: Engine) -> None:
    now = utcnow()
    assert _claim(engine, now).owner
    later = now + dt.timedelta(seconds=91)
    with ThreadPoolExecutor(4) as pool:
        claims = list(pool.map(lambda _: _claim(engine, later), range(4)))
    assert sum(c.owner for c in claims) == 1
