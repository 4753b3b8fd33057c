"""A throwaway PostgreSQL cluster for tests, and a `database_url` fixture over SQLite and PostgreSQL.

The cluster is Debian's PostgreSQL 15 (`/usr/lib/postgresql/15/bin`): `initdb` and `pg_ctl` into a
temp dir, run as the `postgres` user through `runuser` (root cannot run postgres), listening on
127.0.0.1 on a free port with durability off (tests only). It is stopped and deleted at the end.
Each test gets a fresh database (`CREATE DATABASE`), dropped afterwards.

Use in an area's conftest.py: `from db.postgres import database_url, postgres_cluster  # noqa: F401`
(and `migrated_engine` for the api's engine on it, migrated).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from api.db import make_engine
from api.migrations import migrate

PG_BIN = Path(os.environ.get("B3OS_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

    def create_database(self) -> str:
        """Create an empty database and return its name."""
        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
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
        cluster = cls(directory=directory, port=_free_port())
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


@pytest.fixture
def migrated_engine(database_url: str) -> Iterator[Engine]:
    """The api's engine on `database_url`, its schema migrated."""
    engine = make_engine(database_url)
    migrate(engine)
    yield engine
    engine.dispose()
