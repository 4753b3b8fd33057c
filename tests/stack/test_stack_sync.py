"""Node sync against the REAL api: tools published with the real CLI, installed by a real node process from
the registry feed, called through POST /v1/actions/call; tampered blobs and manifests never installed; a
second node joins and calls go to the least loaded node."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import loopback
import pytest
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from api.calls.tables import ActionCall
from api.db import make_engine
from api.models import Node, PackVersion

from .stacktest import (
    ECHO_DIR,
    NAMESPACE,
    Procs,
    clean_env,
    cli,
    free_port,
    issue_node_credential,
    node_status,
    start_api,
    start_node,
    wait_until,
)

KID = f"{NAMESPACE}#sync-test"
ECHO = f"{NAMESPACE}/echo"
BAD_BLOB = f"{NAMESPACE}/tampered-blob"
BAD_MANIFEST = f"{NAMESPACE}/tampered-manifest"


@dataclass
class SyncStack:
    root: Path
    url: str
    env: dict[str, str]
    key: str
    engine: Engine
    procs: Procs
    node_a: dict[str, str]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def node(self, node_id: str) -> Node | None:
        with Session(self.engine) as session:
            return session.get(Node, node_id)

    def call(self, ref: str, body_input: dict[str, Any]) -> httpx.Response:
        return loopback.post(
            f"{self.url}/v1/actions/call",
            headers=self.headers,
            json={"ref": ref, "input": body_input},
            timeout=60,
        )


def _variant(where: Path, pack: str) -> Path:
    """A copy of the echo tool under another pack name, with an archive of its own."""
    root = where / pack.replace("/", "_")
    shutil.copytree(ECHO_DIR, root)
    manifest = json.loads((root / "b3pack.json").read_text())
    manifest["pack"] = pack
    (root / "b3pack.json").write_text(json.dumps(manifest, indent=2))
    (root / "tool" / "VARIANT").write_text(f"{pack}\n")
    return root


def _publish(stack_env: dict[str, str], source: Path, out: Path) -> None:
    code, _, err = cli(stack_env, "tool", "build", str(source), "--kid", KID, "--out", str(out))
    assert code == 0, err
    code, printed, err = cli(stack_env, "tool", "publish", str(out))
    assert code == 0, err
    assert "/echo@1.0.0" in printed, printed


@pytest.fixture(scope="module")
def sync_stack() -> Iterator[SyncStack]:
    root = Path(tempfile.mkdtemp(prefix="b3os-sync-"))
    os.chmod(root, 0o711)
    procs = Procs(root)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        B3OS_DATA_DIR=str(root / "state"),
        B3OS_KEYS_DIR=str(root / "keys"),
        B3OS_NODE_HEARTBEAT_S="1",
        B3OS_API_URL=url,
    )
    engine = make_engine(f"sqlite:///{root / 'state' / 'b3os.db'}")
    try:
        code, printed, err = cli(env, "admin", "init", "--publisher", NAMESPACE)
        assert code == 0, err
        key = printed.split("B3OS_API_KEY=", 1)[1].strip()
        env["B3OS_API_KEY"] = key
        start_api(procs, env, port)
        code, printed, err = cli(env, "keys", "generate", "--kid", KID)
        assert code == 0, err
        public = printed.split("public key: ", 1)[1].strip()
        r = loopback.post(
            f"{url}/v1/actions/publishers/{NAMESPACE}/keys",
            headers={"Authorization": f"Bearer {key}"},
            json={"kid": KID, "public_key": public},
        )
        assert r.status_code in (200, 201), r.text
        _publish(env, ECHO_DIR, root / "built" / "echo")
        for pack in (BAD_BLOB, BAD_MANIFEST):
            _publish(env, _variant(root / "src", pack), root / "built" / pack.replace("/", "_"))
        # Tamper after publish, before any node has seen them.
        with Session(engine) as session:
            blob = session.exec(select(PackVersion).where(col(PackVersion.pack) == BAD_BLOB)).one()
            archive = blob.manifest["tool"]["bundle"]["archive"]["sha256"]
            row = session.exec(select(PackVersion).where(col(PackVersion.pack) == BAD_MANIFEST)).one()
            manifest = dict(row.manifest)
            manifest["description"] = "A tool whose manifest was changed in the database after it was signed."
            row.manifest = manifest
            session.add(row)
            session.commit()
        path = root / "state" / "blobs" / "sha256" / archive[:2] / archive
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF  # same size, other bytes
        path.write_bytes(bytes(data))
        node_a = issue_node_credential(env, "node-a")
        start_node(procs, {**env, **node_a}, "node-a", free_port())
        wait_until("node-a installing echo", lambda: _installed(engine, "node-a", f"{ECHO}@1.0.0"), 60.0,
                   procs.log("node-a"))  # fmt: skip
        yield SyncStack(root=root, url=url, env=env, key=key, engine=engine, procs=procs, node_a=node_a)
    finally:
        procs.stop()
        engine.dispose()
        shutil.rmtree(root)


def _installed(engine: Engine, node_id: str, tag: str) -> bool:
    with Session(engine) as session:
        node = session.get(Node, node_id)
        return node is not None and tag in (node.installed or [])


def _decided_all(stack: SyncStack, node_id: str) -> bool:
    """The node's cursor has passed every published version (it decided each one)."""
    with Session(stack.engine) as session:
        last = max(v.seq for v in session.exec(select(PackVersion)).all())
    cursor = stack.root / f"{node_id}-cache" / ".registry-cursor"
    return cursor.exists() and int(cursor.read_text() or 0) >= last


def test_the_node_installs_the_tool_published_with_the_cli_from_the_feed(sync_stack: SyncStack) -> None:
    wait_until("node-a deciding every version", lambda: _decided_all(sync_stack, "node-a"), 30.0)
    node = sync_stack.node("node-a")
    assert node is not None
    status = node_status(node.url, sync_stack.node_a)
    assert status.status_code == 200
    assert status.json()["installed"] == [f"{ECHO}@1.0.0"]
    assert node.installed == [f"{ECHO}@1.0.0"]
    tool = sync_stack.root / "node-a-cache" / NAMESPACE / "echo" / "1.0.0" / "tool" / "bin" / "echo-tool"
    assert tool.read_bytes() == (ECHO_DIR / "tool" / "bin" / "echo-tool").read_bytes()


def test_a_call_through_the_api_runs_on_the_node(sync_stack: SyncStack) -> None:
    r = sync_stack.call(f"{ECHO}/echo@1", {"text": "hi", "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["output"]["text"] == "hi" and body["output"]["file"]["$bytes"] == "aGVsbG8K"
    with Session(sync_stack.engine) as session:
        call = session.get(ActionCall, body["call_id"])
    assert call is not None and call.node_id == "node-a"


@pytest.mark.parametrize(
    ("pack", "logged"),
    [
        (BAD_BLOB, "is not installed: the fetched archive"),
        (BAD_MANIFEST, "tampered-manifest@1.0.0 is not installed"),
    ],
)
def test_a_tampered_version_is_never_installed_and_its_calls_are_pack_unavailable(
    sync_stack: SyncStack, pack: str, logged: str
) -> None:
    wait_until("node-a deciding every version", lambda: _decided_all(sync_stack, "node-a"), 30.0)
    node = sync_stack.node("node-a")
    assert node is not None and f"{pack}@1.0.0" not in node.installed
    assert not (sync_stack.root / "node-a-cache" / pack / "1.0.0" / "tool").exists()
    assert logged in sync_stack.procs.log("node-a").read_text()
    r = sync_stack.call(f"{pack}/echo@1", {"text": "hi"})
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert error["code"] == "pack_unavailable"
    assert f"no node has {pack} 1.0.0 installed" in error["message"]
    assert int(r.headers["Retry-After"]) >= 1


def test_a_second_node_joins_and_calls_go_to_the_least_loaded_node(sync_stack: SyncStack) -> None:
    env = {**sync_stack.env, **issue_node_credential(sync_stack.env, "node-b")}
    start_node(sync_stack.procs, env, "node-b", free_port())
    wait_until("node-b installing echo", lambda: _installed(sync_stack.engine, "node-b", f"{ECHO}@1.0.0"),
               60.0, sync_stack.procs.log("node-b"))  # fmt: skip
    assert not _installed(sync_stack.engine, "node-b", f"{BAD_BLOB}@1.0.0")

    answers: list[httpx.Response] = []
    first = threading.Thread(
        target=lambda: answers.append(sync_stack.call(f"{ECHO}/fail@1", {"mode": "sleep", "seconds": 2}))
    )
    first.start()

    def running() -> list[ActionCall]:
        with Session(sync_stack.engine) as session:
            return list(
                session.exec(
                    select(ActionCall).where(
                        col(ActionCall.state) == "running", col(ActionCall.action) == "fail"
                    )
                ).all()
            )

    wait_until("the first sleep call running", lambda: len(running()) == 1, 20.0)
    busy = running()[0].node_id
    second = sync_stack.call(f"{ECHO}/echo@1", {"text": "second"})
    first.join(timeout=30)
    assert second.status_code == 200, second.text
    assert answers and answers[0].status_code == 200, answers
    with Session(sync_stack.engine) as session:
        placed = session.get(ActionCall, second.json()["call_id"])
    assert placed is not None
    assert {busy, placed.node_id} == {"node-a", "node-b"}
