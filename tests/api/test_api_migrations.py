"""Migrations with alembic, on SQLite and PostgreSQL: fresh databases, databases at the baseline with a
row in every table, databases of the migrations before alembic, two starters at once, a later ALTER."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlmodel import Session, SQLModel, select

import api.migrations
from api.calls import metering
from api.calls.tables import ActionCall, CallCancel, IdempotencyRecord, KeySpend, MeterEvent, RunCharge
from api.config import Settings
from api.connections.tables import ConnectionRecord
from api.db import is_postgres, make_engine
from api.main import create_app
from api.migrations import (
    BASELINE,
    MigrationError,
    alembic_config,
    api_metadata,
    current_revision,
    head_revision,
    legacy_version,
    migrate,
)
from api.models import (
    ApiKey,
    BlobContent,
    BlobUpload,
    Node,
    NodeCredential,
    Organization,
    Pack,
    PackVersion,
    PublishedBlob,
    Publisher,
    SigningKey,
)
from api.routines.tables import RoutineRecord, RoutineVersion
from api.runs.tables import RunGrant, RunRecord
from api.schedules.tables import RoutineSchedule
from api.triggers.tables import TriggerDelivery, TriggerSubscription
from cli.main import main

T = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
SECRET = "b3_" + "k" * 40

# One row per table of the baseline, written with the baseline's columns (frozen, like the revision).
# fmt: off
ROWS: dict[str, dict[str, Any]] = {
    "organizations": {"id": "org_1", "name": "Acme", "is_operator": True, "created_at": T},
    "api_keys": {
        "id": "key_1", "org_id": "org_1", "name": "owner", "scopes": ["*"],
        "monthly_spend_cap_microusd": 5_000_000, "prefix": SECRET[:11],
        "key_hash": hashlib.sha256(SECRET.encode()).hexdigest(), "created_at": T, "revoked_at": None,
    },
    "publishers": {"namespace": "com.example.tools", "org_id": "org_1", "created_at": T},
    "signing_keys": {
        "kid": "com.example.tools#k1", "public_key": "A" * 44, "namespace": "com.example.tools",
        "created_at": T, "revoked_at": T,
    },
    "blob_uploads": {"sha256": "a" * 64, "org_id": "org_1", "bytes": 2**40, "created_at": T},
    "packs": {"id": "com.example.tools/echo", "namespace": "com.example.tools", "created_at": T},
    "pack_versions": {
        "pack": "com.example.tools/echo", "version": "1.2.3-rc.1", "content_hash": "sha256:" + "b" * 64,
        "kid": "com.example.tools#k1", "major": 1, "minor": 2, "patch": 3, "prerelease": "rc.1",
        "manifest": {"name": "echo", "actions": {"echo": {"price_microusd": 10}}},
        "files": [{"path": "tool/main.py", "sha256": "c" * 64, "size": 120}], "seq": 2**33,
        "org_id": "org_1", "published_by": "key_1", "published_at": T,
    },
    "nodes": {
        "node_id": "node-a", "url": "http://127.0.0.1:8710", "slots_total": 8, "slots_free": 6,
        "installed": ["com.example.tools/echo@1.2.3-rc.1"], "first_seen": T, "last_seen": T,
    },
    "tool_calls": {
        "id": "call_1", "org_id": "org_1", "key_id": "key_1", "surface": "http",
        "pack": "com.example.tools/echo", "version": "1.2.3-rc.1", "action": "echo", "node_id": "node-a",
        "state": "done", "timeout_ms": 30_000,
        "price_microusd": 10, "started_at": T, "deadline_at": T + dt.timedelta(seconds=30),
        "lease_expires_at": T + dt.timedelta(seconds=40), "finished_at": T + dt.timedelta(seconds=1),
        "status": 200, "code": None, "reason": None, "ran": True, "vcpu_ms": 12, "gib_ms": 6,
        "compute": 3, "floor": 100, "price": 10, "total": 113,
    },
    "meter_events": {
        "call_id": "call_1", "org_id": "org_1", "key_id": "key_1", "unit": "actions.vcpu_ms", "quantity": 12,
        "at": T, "publisher": "com.example.tools", "pack": "com.example.tools/echo", "action": "echo",
    },
    "idempotency_records": {
        "org_id": "org_1", "key": "order-42", "request_hash": "sha256:" + "d" * 64, "state": "done",
        "claimed_until": T, "created_at": T, "expires_at": T + dt.timedelta(days=1), "call_id": "call_1",
        "status": 200, "body": {"outputs": {"text": "hi"}, "cost": {"total_microusd": 113}},
    },
    "routines": {
        "id": "rtn_1", "org_id": "org_1", "name": "hello", "version": 2, "description": "says hi",
        "source": "name: hello\nsteps: []\n", "routine": {"name": "hello", "steps": []},
        "created_at": T, "updated_at": T + dt.timedelta(hours=1),
    },
    "routine_runs": {
        "id": "run_1", "org_id": "org_1", "key_id": "key_1", "routine_name": "hello", "routine_version": 2,
        "workflow_id": "routine-hello-run_1", "idempotency_key": "run-7",
        "request_hash": "sha256:" + "e" * 64,
        "inputs": {"who": "world"}, "status": "succeeded", "result": {"text": "hi world"}, "error": None,
        "created_at": T, "finished_at": T + dt.timedelta(seconds=2),
    },
    "call_cancels": {
        "call_id": "call_1", "org_id": "org_1", "key_id": "key_1", "requested_at": T, "node_state": "killed",
    },
    "connections": {
        "pack": "com.example.weather", "connection": "api", "id": "con_1", "org_id": "org_1",
        "kind": "api_key",
        "params": {"header": "X-Key"}, "hint": "9f3a", "sealed": "b3seal-v1." + "z" * 80,
        "created_at": T, "updated_at": T,
    },
    "node_credentials": {
        "node_id": "node-a", "prefix": "b3n_abcdefgh", "secret_hash": "1" * 64, "call_key": "2" * 64,
        "created_at": T, "revoked_at": None,
    },
    "run_grants": {
        "grant_hash": "f" * 64, "run_id": "run_1", "org_id": "org_1", "key_id": "key_1",
        "workflow_id": "routine-hello-run_1", "created_at": T, "expires_at": T + dt.timedelta(days=1),
        "cancelled_at": None, "ended_at": T + dt.timedelta(seconds=2),
    },
    "routine_versions": {
        "org_id": "org_1", "name": "hello", "hash": "sha256:" + "a" * 64,
        "source": "name: hello\nsteps: []\n", "routine": {"name": "hello", "steps": []}, "stored_at": T,
    },
    "routine_schedules": {
        "id": "sch_1", "org_id": "org_1", "routine_name": "hello", "key_id": "key_1", "cron": "0 7 * * 1-5",
        "timezone": "Europe/Paris", "inputs": {"who": "world"}, "overlap": "buffer_one", "declared": True,
        "paused": False, "grant_hash": "9" * 64, "created_at": T,
    },
    "blobs": {"sha256": "a" * 64, "size": 5, "data": b"\x00\xffab\n", "created_at": T},
    "published_blobs": {"sha256": "d" * 64},
    "trigger_subscriptions": {
        "id": "trg_" + "x" * 20, "org_id": "org_1", "routine_name": "hello", "key_id": "key_1",
        "position": 0, "trigger": "io.b3os/github/issue-opened@1", "pin": "io.b3os/github/issue-opened@1.0.0",
        "kind": "webhook", "with_input": {}, "connection": None, "inputs": {}, "cursor": None,
        "polled_at": None, "created_at": T, "ended_at": None,
    },
    "trigger_deliveries": {
        "id": "dlv_1", "subscription_id": "trg_" + "x" * 20, "org_id": "org_1", "received_at": T,
        "verified": True, "status": "started", "reason": None, "event_id": "e-1", "dedupe": "e-1",
        "event": {"number": 7}, "run_id": "run_1", "attempts": 1, "last_error": None,
    },
    "key_spend": {"key_id": "key_1", "month": "2025-03", "org_id": "org_1", "price": 10, "total": 113},
    "run_charges": {"run_id": "run_1", "total": 113},
}
# tables renamed by a later revision: their name at the baseline (ROWS and MODELS go by it)
BASELINE_NAMES = {"action_calls": "tool_calls"}
# tables of later revisions
AFTER_BASELINE = {
    "node_credentials", "run_grants", "routine_versions", "routine_schedules", "blobs", "published_blobs",
    "trigger_subscriptions", "trigger_deliveries", "key_spend", "run_charges",
}

MODELS: dict[str, type[SQLModel]] = {
    "organizations": Organization, "api_keys": ApiKey, "publishers": Publisher, "signing_keys": SigningKey,
    "blob_uploads": BlobUpload, "packs": Pack, "pack_versions": PackVersion, "nodes": Node,
    "tool_calls": ActionCall, "meter_events": MeterEvent, "idempotency_records": IdempotencyRecord,
    "routines": RoutineRecord, "routine_runs": RunRecord, "call_cancels": CallCancel,
    "connections": ConnectionRecord, "run_grants": RunGrant, "node_credentials": NodeCredential,
    "routine_versions": RoutineVersion, "routine_schedules": RoutineSchedule, "blobs": BlobContent,
    "published_blobs": PublishedBlob, "trigger_subscriptions": TriggerSubscription,
    "trigger_deliveries": TriggerDelivery, "key_spend": KeySpend, "run_charges": RunCharge,
}
# fmt: on

# api/migrations.py before alembic, frozen: its versions and descriptions (the tables of version N are
# the baseline's group N: that code created them from the models of its day, equal to the baseline).
OLD_MIGRATIONS = (
    (1, "organizations, api keys, publishers, signing keys, blobs, packs, pack versions, nodes"),
    (2, "action calls: tool_calls, meter_events, idempotency_records"),
    (3, "routines and their runs: routines, routine_runs"),
    (4, "cancels of running calls: call_cancels"),
    (5, "connections of declarative packs: connections"),
)
OLD_SCHEMA_VERSION = sa.Table(
    "schema_version",
    sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("description", sa.String, nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def build_old_database(engine: sa.Engine, version: int = 5) -> None:
    """What the old `migrate(engine)` left at `version`: its loop, one transaction per migration."""
    baseline = ScriptDirectory.from_config(alembic_config()).get_revision(BASELINE)
    assert baseline is not None
    with engine.begin() as conn:
        OLD_SCHEMA_VERSION.create(conn, checkfirst=True)
    for number, description in OLD_MIGRATIONS[:version]:
        with engine.begin() as conn:
            with Operations.context(MigrationContext.configure(conn)):
                baseline.module.GROUPS[number - 1]()
            row = {"version": number, "description": description, "applied_at": T}
            conn.execute(OLD_SCHEMA_VERSION.insert(), row)


def build_baseline_database(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), BASELINE)


def insert_rows(engine: sa.Engine) -> set[str]:
    """Write the row of every table the database has (through its own columns, not the models)."""
    tables = sa.MetaData()
    tables.reflect(engine)
    names = {t.name for t in tables.sorted_tables} - {"alembic_version", "schema_version"}
    with engine.begin() as conn:
        for table in tables.sorted_tables:
            if table.name in names:
                conn.execute(table.insert(), ROWS[BASELINE_NAMES.get(table.name, table.name)])
    return {BASELINE_NAMES.get(name, name) for name in names}


def assert_rows_read_back(engine: sa.Engine, names: set[str]) -> None:
    """Each row reads back through today's models with every value it was written with."""
    with Session(engine) as session:
        for name in sorted(names):
            (row,) = session.exec(select(MODELS[name])).all()
            assert {k: getattr(row, k) for k in ROWS[name]} == ROWS[name], name


def schema_differences(engine: sa.Engine) -> list[Any]:
    """What alembic autogenerate finds between the database and the models (the old table aside)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": lambda name, *_: name != "schema_version"}
        )
        return list(compare_metadata(context, api_metadata()))


def test_a_fresh_database_is_migrated_to_head_and_matches_the_models(engine: sa.Engine) -> None:
    assert current_revision(engine) is None
    assert migrate(engine) == head_revision()
    assert current_revision(engine) == head_revision()
    differences = schema_differences(engine)
    assert differences == [], f"the models differ from head; add a revision (docs/api.md): {differences}"


def test_rows_at_the_baseline_survive_the_upgrade_to_head(engine: sa.Engine) -> None:
    build_baseline_database(engine)
    assert current_revision(engine) == BASELINE
    names = insert_rows(engine)
    assert names == set(ROWS) - AFTER_BASELINE
    assert migrate(engine) == head_revision()
    assert_rows_read_back(engine, names)


def test_routines_stored_before_versions_get_their_current_version_kept(engine: sa.Engine) -> None:
    build_baseline_database(engine)
    insert_rows(engine)
    migrate(engine)
    routine = ROWS["routines"]
    with Session(engine) as session:
        (kept,) = session.exec(select(RoutineVersion)).all()
    source = routine["source"]
    assert (kept.org_id, kept.name, kept.routine) == ("org_1", "hello", routine["routine"])
    assert kept.source == source
    assert kept.hash == "sha256:" + hashlib.sha256(source.encode()).hexdigest()
    assert kept.stored_at == routine["updated_at"]


def test_calls_stored_before_the_spend_sums_are_added_up_per_key_and_month_and_per_run(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0014_run_cost_ceiling")
    insert_rows(engine)  # call_1: key_1, ended in March 2025, price 10, total 113
    call = dict(ROWS["tool_calls"])
    march_end = dt.datetime(2025, 3, 31, 23, 59, 59, tzinfo=dt.UTC)
    rows = [  # (id, key, ended at, state, price, total, run): a call counts in the month it ended in
        ("call_2", "key_1", T + dt.timedelta(days=3), "done", 5, 50, "run_9"),
        ("call_3", "key_1", march_end, "done", 0, 7, "run_9"),
        ("call_4", "key_1", march_end + dt.timedelta(seconds=2), "done", 1, 9, None),  # started in March
        ("call_5", "key_2", T, "done", 0, 4, None),
        ("call_6", "key_1", None, "running", 3, 0, "run_9"),  # not ended: not added
        ("call_7", "key_1", T, "lost", 0, 0, None),
    ]
    with engine.begin() as conn:
        calls = sa.Table("action_calls", sa.MetaData(), autoload_with=conn)
        for id_, key, ended, state, price, total, run in rows:
            conn.execute(
                calls.insert(),
                {
                    **call,
                    "id": id_,
                    "key_id": key,
                    "started_at": (ended or T) - dt.timedelta(seconds=5),
                    "finished_at": ended,
                    "state": state,
                    "price": price,
                    "total": total,
                    "run_id": run,
                },
            )
    migrate(engine)
    with Session(engine) as session:
        sums = {(s.key_id, s.month, s.org_id, s.price, s.total) for s in session.exec(select(KeySpend))}
        runs = {(r.run_id, r.total) for r in session.exec(select(RunCharge))}
    assert sums == {
        ("key_1", "2025-03", "org_1", 10 + 5, 113 + 50 + 7),
        ("key_1", "2025-04", "org_1", 1, 9),
        ("key_2", "2025-03", "org_1", 0, 4),
    }
    assert runs == {("run_9", 57)}


def test_the_usage_sums_are_made_from_the_calls_and_meter_events_stored_before(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0015_sums_and_indexes")
    insert_rows(engine)  # call_1: key_1, ended in March 2025 (compute 3, floor 100, price 10), 12 vCPU ms
    call, event = dict(ROWS["tool_calls"]), dict(ROWS["meter_events"])
    april = T + dt.timedelta(days=30)
    calls = [  # (id, key, ended at, state, compute, floor, price): a free call (total 0) counts too
        ("call_2", "key_1", T, "done", 5, 100, 0),
        ("call_3", "key_1", april, "done", 0, 10, 0),
        ("call_4", "key_2", T, "done", 0, 0, 0),
        ("call_5", "key_1", None, "running", 0, 0, 0),
        ("call_6", "key_1", T, "lost", 0, 0, 0),
    ]
    events = [  # (call, key, unit, quantity, at)
        ("call_1", "key_1", "actions.tool_call", 1, T),
        ("call_1", "key_1", "actions.publisher_microusd", 10, T),
        ("call_2", "key_1", "actions.vcpu_ms", 30, T),
        ("call_2", "key_1", "actions.gib_ms", 7, T),
        ("call_3", "key_1", "actions.call", 1, april),
    ]
    with engine.begin() as conn:
        tables = sa.MetaData()
        tables.reflect(conn, only=["action_calls", "meter_events"])
        for id_, key, ended, state, compute, floor, price in calls:
            conn.execute(
                tables.tables["action_calls"].insert(),
                {
                    **call,
                    "id": id_,
                    "key_id": key,
                    "finished_at": ended,
                    "state": state,
                    "compute": compute,
                    "floor": floor,
                    "price": price,
                    "total": compute + floor + price,
                },
            )
        for call_id, key, unit, quantity, at in events:
            conn.execute(
                tables.tables["meter_events"].insert(),
                {**event, "call_id": call_id, "key_id": key, "unit": unit, "quantity": quantity, "at": at},
            )
    migrate(engine)
    with Session(engine) as session:
        march = metering.usage(session, org_id="org_1", month="2025-03")
        april_usage = metering.usage(session, org_id="org_1", month="2025-04")
    assert (march["calls"], march["cost"]) == (3, {"compute": 8, "floor": 200, "price": 10, "total": 218})
    assert march["units"] == {
        "actions.vcpu_ms": 42,
        "actions.gib_ms": 7,
        "actions.tool_call": 1,
        "actions.publisher_microusd": 10,
        "actions.call": 0,
    }
    assert [(k["key_id"], k["calls"], k["cost"]["total"]) for k in march["keys"]] == [
        ("key_1", 2, 218),
        ("key_2", 1, 0),
    ]
    assert (april_usage["calls"], april_usage["units"]["actions.call"]) == (1, 1)
    assert april_usage["cost"] == {"compute": 0, "floor": 10, "price": 0, "total": 10}


def test_the_blobs_of_versions_published_before_stay_readable_by_nodes(engine: sa.Engine) -> None:
    build_baseline_database(engine)
    insert_rows(engine)
    migrate(engine)
    with Session(engine) as session:
        assert [b.sha256 for b in session.exec(select(PublishedBlob))] == ["c" * 64]


def test_a_database_of_the_old_migrations_is_stamped_at_the_baseline_and_keeps_working(
    engine: sa.Engine,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_old_database(engine)
    names = insert_rows(engine)
    assert legacy_version(engine) == 5
    monkeypatch.setenv("B3OS_DATABASE_URL", database_url)
    assert main(["admin", "migrate"]) == 0
    assert capsys.readouterr().out == (
        f"before: schema_version 5 (made before alembic)\nafter: {head_revision()} (head)\n"
    )
    assert current_revision(engine) == head_revision()
    assert legacy_version(engine) is None
    assert_rows_read_back(engine, names)
    assert schema_differences(engine) == []
    with engine.connect() as conn:  # the old record is left as it was
        assert conn.execute(sa.text("SELECT MAX(version) FROM schema_version")).scalar_one() == 5
    app = create_app(Settings(data_dir=tmp_path / "state", database_url=database_url))
    try:
        with TestClient(app) as client:
            r = client.get("/v1/keys", headers={"Authorization": f"Bearer {SECRET}"})
        assert r.status_code == 200
        assert [k["id"] for k in r.json()["keys"]] == ["key_1"]
    finally:
        app.state.engine.dispose()


def test_a_database_of_an_older_old_migration_gets_the_tables_it_lacked(engine: sa.Engine) -> None:
    build_old_database(engine, version=3)
    names = insert_rows(engine)
    assert "connections" not in names and "call_cancels" not in names
    assert migrate(engine) == head_revision()
    assert_rows_read_back(engine, names)
    assert schema_differences(engine) == []


def test_an_old_schema_version_no_release_made_is_refused_and_left_unchanged(engine: sa.Engine) -> None:
    build_old_database(engine)
    with engine.begin() as conn:
        row = {"version": 7, "description": "from elsewhere", "applied_at": T}
        conn.execute(OLD_SCHEMA_VERSION.insert(), row)
    with pytest.raises(MigrationError, match="schema_version is 7, which no b3os release made"):
        migrate(engine)
    assert "alembic_version" not in sa.inspect(engine).get_table_names()
    assert legacy_version(engine) == 7


def test_two_api_processes_starting_at_once_migrate_once(database_url: str) -> None:
    engines = [make_engine(database_url) for _ in range(2)]
    created: list[str] = []
    results: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def count_creates(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE"):
            created.append(statement.split()[2].strip('"'))

    def starter(engine: sa.Engine) -> None:
        try:
            start.wait(timeout=10)
            results.append(migrate(engine))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    for engine in engines:
        sa.event.listen(engine, "before_cursor_execute", count_creates)
    threads = [threading.Thread(target=starter, args=(engine,)) for engine in engines]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for engine in engines:
            engine.dispose()
    assert errors == []
    assert results == [head_revision()] * 2
    assert sorted(created) == sorted([*ROWS, "alembic_version"])


LATER_REVISION = '''"""A later revision as a maintainer writes one: a column, a longer name."""

import sqlalchemy as sa
from alembic import op

revision = "9001_test_later"
down_revision = {head!r}


def upgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.add_column(sa.Column("plan", sa.String(length=20), nullable=False, server_default="free"))
        batch.alter_column("name", type_=sa.String(length=300), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("organizations") as batch:
        batch.drop_column("plan")
'''


def test_a_later_alter_of_a_referenced_table_runs_with_its_rows(
    engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On SQLite the batch copies organizations and drops the old table, which api_keys and others reference.
    migrate(engine)
    insert_rows(engine)
    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "9001_test_later.py").write_text(LATER_REVISION.format(head=head_revision()))

    def config_with_later(connection: sa.Connection | None = None) -> Config:
        config = alembic_config(connection)
        config.set_main_option("path_separator", "os")
        config.set_main_option(
            "version_locations", os.pathsep.join([str(api.migrations.SCRIPT_DIR / "versions"), str(versions)])
        )
        return config

    monkeypatch.setattr(api.migrations, "alembic_config", config_with_later)
    monkeypatch.setattr(api.migrations, "HEAD", "9001_test_later")  # as the release with it would say
    assert migrate(engine) == "9001_test_later"
    with engine.connect() as conn:
        plan = conn.execute(sa.text("SELECT name, plan FROM organizations")).one()
        assert tuple(plan) == ("Acme", "free")
        if not is_postgres(engine):
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    assert_rows_read_back(engine, set(ROWS))
