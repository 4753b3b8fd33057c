"""One error body everywhere: framework errors, oversize bodies, unknown routes, OpenAPI."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from apitest import Org
from db.postgres import PostgresCluster
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import inspect
from sqlmodel import Session

from api.config import Settings
from api.db import get_session, make_engine
from api.main import create_app
from api.migrations import HEAD, current_revision, head_revision, migrate


def test_an_oversize_json_body_is_refused_before_it_is_parsed(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org]
) -> None:
    org = make_org()
    limit = app.state.settings.max_body_bytes
    big = b'{"scopes": ["' + b"a" * limit + b'"]}'
    r = client.post("/v1/keys", headers={**org.headers, "Content-Type": "application/json"}, content=big)
    assert r.status_code == 413
    assert r.json()["error"] == {
        "code": "payload_too_large",
        "message": f"The request body is larger than the limit of {limit} bytes.",
        "limit_bytes": limit,
    }

    def chunks() -> Iterator[bytes]:
        yield b'{"scopes": ["'
        for _ in range(limit // 65536 + 1):
            yield b"a" * 65536
        yield b'"]}'

    r = client.post("/v1/keys", headers={**org.headers, "Content-Type": "application/json"}, content=chunks())
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"


def test_unknown_routes_and_methods_answer_the_error_body(client: TestClient) -> None:
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json() == {
        "error": {"code": "not_found", "message": "There is no such endpoint."}
    }
    r = client.patch("/healthz")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_a_database_that_cannot_be_reached_is_503_with_retry_after_never_a_500(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org], caplog: pytest.LogCaptureFixture
) -> None:
    org = make_org()
    with socket.socket() as s:  # a port nothing listens on: the server is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine, app.state.engine = app.state.engine, make_engine(f"postgresql://postgres@127.0.0.1:{port}/gone")
    try:
        r = client.get("/v1/usage", headers=org.headers)
    finally:
        app.state.engine.dispose()
        app.state.engine = engine
    assert r.status_code == 503 and r.headers["Retry-After"] == "2"
    assert r.json()["error"] == {
        "code": "unavailable",
        "reason": "database",
        "message": "The database cannot be reached at the moment; try again after Retry-After.",
    }
    assert "Traceback" not in caplog.text and str(port) not in caplog.text
    assert client.get("/v1/usage", headers=org.headers).status_code == 200  # and back


def test_a_wrong_json_type_names_the_field_and_value(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    org = make_org()
    r = client.post("/v1/keys", headers=org.headers, json={"scopes": "actions:call"})
    assert r.status_code == 400
    assert r.json()["error"]["field"] == "scopes"
    assert r.json()["error"]["message"].startswith("The field scopes is invalid: ")
    assert "'actions:call'" in r.json()["error"]["message"]
    r = client.post("/v1/keys", headers=org.headers, json=[1, 2])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


def test_openapi_documents_the_one_error_body(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert "ErrorBody" in schema["components"]["schemas"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    publish = schema["paths"]["/v1/actions/packs"]["post"]["responses"]
    assert "422" not in publish
    assert "404" not in publish  # each route documents the statuses it answers, and a publish has no 404
    for status in ("400", "401", "403", "409", "413"):
        assert publish[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"
        }


def test_the_head_the_api_checks_at_start_is_alembics_newest_revision() -> None:
    assert HEAD == head_revision()  # a new revision must move api.migrations.HEAD too


def test_migrations_are_recorded_and_run_once(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) is None
        assert migrate(engine) == head_revision()
        assert migrate(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert {
            "alembic_version",
            "organizations",
            "api_keys",
            "publishers",
            "signing_keys",
            "blob_uploads",
            "packs",
            "pack_versions",
            "nodes",
        } <= tables
    finally:
        engine.dispose()


def test_settings_default_to_sqlite_under_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("B3OS_DATABASE_URL", raising=False)
    s = Settings(data_dir=tmp_path)
    assert s.resolved_database_url() == f"sqlite:///{tmp_path.resolve() / 'b3os.db'}"
    assert s.resolved_blob_dir() == tmp_path.resolve() / "blobs"
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    assert Settings(data_dir=tmp_path).resolved_database_url() == "postgresql://u@h/db"
    monkeypatch.setenv("B3OS_DATABASE_URL", "sqlite:///other.db")
    assert Settings(data_dir=tmp_path).resolved_database_url() == "sqlite:///other.db"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://", "names an in-memory SQLite database"),
        ("sqlite:///:memory:", "names an in-memory SQLite database"),
        ("mysql://u:hunter2@h/db", "'mysql://u:***@h/db' names a mysql database"),
        ("not a url", "is not a database URL"),
    ],
)
def test_a_database_url_b3os_cannot_run_on_is_refused_naming_the_setting(
    url: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("B3OS_DATABASE_URL", raising=False)
    with pytest.raises(ValidationError) as refused:
        Settings(data_dir=tmp_path, database_url=url)
    assert "B3OS_DATABASE_URL" in str(refused.value) and says in str(refused.value)
    assert "hunter2" not in str(refused.value)
    monkeypatch.setenv("DATABASE_URL", url)  # the fallback too, when the api asks for the URL
    with pytest.raises(ValueError) as fell_back:
        Settings(data_dir=tmp_path).resolved_database_url()
    assert str(fell_back.value).startswith("DATABASE_URL") and says in str(fell_back.value)
    with pytest.raises(ValueError) as made:  # and every engine made (the checker's, the migrations')
        make_engine(url)
    assert str(made.value).startswith("the database URL") and says in str(made.value)


def test_healthz_says_when_the_database_does_not_answer(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))  # SQLite: asked on the event loop, no worker thread
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"ok": True}
        path = Path(app.state.engine.url.database)
        app.state.health.close()  # as after an error: the next probe opens the file again
        path.rename(path.with_name("moved"))  # a volume that went away
        try:
            r = client.get("/healthz")
            assert r.status_code == 503 and r.headers["Retry-After"] == "2"
            assert (r.json()["error"]["code"], r.json()["error"]["reason"]) == ("unavailable", "database")
        finally:
            path.with_name("moved").rename(path)
        assert client.get("/healthz").json() == {"ok": True}  # answers again once the database is back
    app.state.engine.dispose()


async def test_a_session_whose_database_went_away_before_its_close_is_no_error_of_the_request(
    postgres_cluster: PostgresCluster, caplog: pytest.LogCaptureFixture
) -> None:
    name = postgres_cluster.create_database()
    engine = make_engine(postgres_cluster.url(name))
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(engine=engine)))
    try:
        dependency = get_session(request)  # type: ignore[arg-type]
        session = await anext(dependency)
        backend = session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with engine.connect() as other:  # the server ends the request's connection, as a shutdown does
            other.exec_driver_sql(f"SELECT pg_terminate_backend({backend})")
        with pytest.raises(StopAsyncIteration):  # the close after the answer: its ROLLBACK fails, quietly
            await anext(dependency)
        assert "closed on a lost connection: OperationalError" in caplog.text
        assert "Traceback" not in caplog.text
        with Session(engine) as fresh:  # the dead connection left the pool
            assert fresh.connection().exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        engine.dispose()
        postgres_cluster.drop_database(name)


def test_a_pooled_connection_the_server_ended_is_dropped_with_one_warning_line(
    postgres_cluster: PostgresCluster, caplog: pytest.LogCaptureFixture
) -> None:
    name = postgres_cluster.create_database()
    engine = make_engine(postgres_cluster.url(name))
    try:
        pooled = engine.raw_connection()  # the pool's own connection, as a session's closing hands it back
        cursor = pooled.cursor()
        cursor.execute("SELECT pg_backend_pid()")  # a transaction is open
        (backend,) = cursor.fetchone() or (None,)
        with engine.connect() as other:  # the server ends the connection, as a restart does
            other.exec_driver_sql(f"SELECT pg_terminate_backend({backend})")
        with caplog.at_level(logging.WARNING):
            pooled.close()  # back to the pool: its reset (a ROLLBACK) fails on the dead connection
        lost = "a pooled database connection was lost and dropped (AdminShutdown: terminating connection"
        assert lost in caplog.text
        assert "Traceback" not in caplog.text and "ERROR" not in caplog.text
        with engine.connect() as fresh:
            assert fresh.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        engine.dispose()
        postgres_cluster.drop_database(name)
