"""A real api process for the tests that talk HTTP to it: uvicorn on 127.0.0.1, SQLite in a tmp dir.

`start_live_api(root)` starts it (optionally on a Temporal frontend, with a routine worker process
polling its task queue), makes an operator organization with a key holding every scope (`*` and
`actions:tools:publish`) that publishes `com.example.tools`, registers a signing key and publishes the
echo tool, so that `com.example.tools/echo/echo@1` resolves. No node runs: a call of it answers 503
with Retry-After (and a run's step waits that long, again and again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import loopback
from apitest import NAMESPACE, Org, build_echo, register_key, upload
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlmodel import Session
from workers import PATIENCE_S, free_port

from api.accounts import node_credentials, organizations
from api.accounts.scopes import OWNER_SCOPES
from api.db import make_engine
from api.registry import publishers
from cli.stack_options import api_argv

REPO = Path(__file__).resolve().parents[2]
WORKER_TOKEN = "worker-token-live-api"
ECHO_REF = f"{NAMESPACE}/echo/echo@1"


@dataclass
class LiveApi:
    """A running api process, its database and the organization the tests call it as."""

    url: str
    root: Path
    process: subprocess.Popen[bytes]
    owner: Org
    log: Path
    worker: subprocess.Popen[bytes] | None = None
    node_secret: str = ""

    def stop(self) -> None:
        """Stop the worker and the api process."""
        for process in (self.worker, self.process):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the api exited:\n{log.read_text()[-3000:]}")
        try:
            if loopback.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the api did not answer /healthz:\n{log.read_text()[-3000:]}")


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "engine.worker"], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + PATIENCE_S
    while b"polling" not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            raise AssertionError(f"the routine worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return worker


def start_live_api(root: Path, *, temporal_address: str | None = None) -> LiveApi:
    """Start the api on SQLite under `root`, make its owner organization and publish the echo tool.

    Args:
        root: a fresh directory for the database, the blobs, the build and the logs.
        temporal_address: the Temporal frontend runs start on, with a routine worker polling their task
            queue (default: none; starting or reading a run answers 503).
    """
    state = root / "state"
    state.mkdir(parents=True)
    db_url = f"sqlite:///{state / 'b3os.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(
        B3OS_DATA_DIR=str(state),
        B3OS_DATABASE_URL=db_url,
        B3OS_WORKER_TOKEN=WORKER_TOKEN,
        B3OS_AUTH_FAILURES_PER_MINUTE="100000",  # schemathesis sends bad keys on purpose, all from 127.0.0.1
        B3OS_TEMPORAL_ADDRESS=temporal_address or "127.0.0.1:1",
        B3OS_TEMPORAL_TASK_QUEUE=f"live-api-{root.name}",
    )
    port = free_port()
    log = root / "api.log"
    with log.open("wb") as out:
        process = subprocess.Popen(api_argv(port), env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log)
        engine = make_engine(db_url)
        with Session(engine) as session:
            org = organizations.create_organization(session, name="live api owner", is_operator=True)
            key, secret = organizations.create_api_key(
                session, org_id=org.id, scopes=OWNER_SCOPES, name="owner"
            )
            publishers.set_publisher(session, namespace=NAMESPACE, org_id=org.id)
            _, node_secret = node_credentials.issue_credential(session, node_id="live-api-node")
            session.commit()
            owner = Org(org_id=org.id, key_id=key.id, key=secret)
        engine.dispose()
        signing = Ed25519PrivateKey.generate()
        built = build_echo(root, signing)
        with loopback.client(base_url=url, timeout=30) as client:
            register_key(client, owner, signing)
            upload(client, owner, built.files)
            r = client.post(
                "/v1/actions/packs",
                headers=owner.headers,
                json={"manifest": built.manifest, "files": built.records},
            )
            assert r.status_code == 201, r.text
        live = LiveApi(url=url, root=root, process=process, owner=owner, log=log, node_secret=node_secret)
    except BaseException:
        process.terminate()
        process.wait(timeout=15)
        raise
    if temporal_address is not None:
        try:
            live.worker = _start_worker({**env, "B3OS_API_URL": url}, root / "worker.log")
        except BaseException:
            live.stop()
            raise
    return live
