"""A throwaway PostgreSQL cluster for tests, and a `database_url` fixture over SQLite and PostgreSQL.

The cluster is Debian's PostgreSQL 15 (`/usr/lib/postgresql/15/bin`): `initdb` and `pg_ctl` into a
temp dir, run as the `postgres` user through `runuser` (root cannot run postgres), listening on
127.0.0.1 on a free port with durability off (tests only). It is stopped and deleted at the end.
Each test gets a fresh database (`CREATE DATABASE`), dropped afterwards.

`database_url` is an empty database; `migrated_database_url` one at the api's head revision, copied from a
template migrated once per test process (a SQLite file copied with the backup API, a PostgreSQL
`CREATE DATABASE ... TEMPLATE`): migrating each test's database took about a second of the suite, twice.

Its fixtures are registered for every test (tests/conftest.py's `pytest_plugins`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine
from workers import free_port

from api.db import make_engine
from api.migrations import migrate

PG_BIN = Path(os.environ.get("B3OS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(*cmd: str) -> list[str]:
    return list(cmd) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]


@dataclass
class PostgresCluster:
    """A running throwaway cluster."""

    directory: Path
    port: int

    @property
    def admin_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of a database of this cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, *, template: str = "") -> str:
        """Create a database, empty or a copy of `template`, and return its name."""
        name = "t_" + uuid.uuid4().hex[:16]
        copy = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, closing whatever connections remain."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @classmethod
    def start(cls) -> PostgresCluster:
        """initdb and start a cluster in a fresh temp dir."""
        if not (PG_BIN / "initdb").exists():
            raise RuntimeError(f"PostgreSQL is not installed at {PG_BIN} (make setup installs it)")
        directory = Path(tempfile.mkdtemp(prefix="b3os-pg-"))
        directory.chmod(0o755)
        data = directory / "data"
        data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
            shutil.chown(data, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ),
            check=True,
            capture_output=True,
        )
        cluster = cls(directory=directory, port=free_port())
        cluster.resume()
        return cluster

    def halt(self) -> None:
        """Stop the server, keeping its files, until `resume` (tests/test_faults.py)."""
        subprocess.run(
            _as_postgres(
                str(PG_BIN / "pg_ctl"), "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop"
            ),
            check=True,
            capture_output=True,
        )

    def resume(self) -> None:
        """Start the server on its directory and port (at start, and after `halt`)."""
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        subprocess.run(
            _as_postgres(
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                "-o",
                options,
                "-l",
                str(self.directory / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        """Stop the cluster and delete its files."""
        subprocess.run(
            _as_postgres(
                str(PG_BIN / "pg_ctl"), "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop"
            ),
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL cluster for the session."""
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, then a PostgreSQL database (each test runs on both)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'b3os.db'}"
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    name = cluster.create_database()
    try:
        yield cluster.url(name)
    finally:
        cluster.drop_database(name)


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the head revision, migrated once per test process."""
    path = tmp_path_factory.mktemp("template") / "b3os.db"
    _migrate(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_cluster: PostgresCluster) -> str:
    """A PostgreSQL database at the head revision, migrated once per test process: the template."""
    name = postgres_cluster.create_database()
    _migrate(postgres_cluster.url(name))
    return name


def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate(engine)
    finally:
        engine.dispose()  # a template database takes no copy while a connection to it is open


@pytest.fixture(params=["sqlite", "postgres"])
def migrated_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database at the api's head revision: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        path = tmp_path / "b3os.db"
        template: Path = request.getfixturevalue("_migrated_sqlite")
        with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(path)) as copy:
            source.backup(copy)
        yield f"sqlite:///{path}"
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    name = cluster.create_database(template=request.getfixturevalue("_migrated_postgres"))
    try:
        yield cluster.url(name)
    finally:
        cluster.drop_database(name)


@pytest.fixture
def migrated_engine(migrated_database_url: str) -> Iterator[Engine]:
    """The api's engine on `migrated_database_url`."""
    engine = make_engine(migrated_database_url)
    yield engine
    engine.dispose()
