"""`b3os dev` as a user runs it: Temporal, the api, a node and the worker on free loopback ports, a second
node joining by hand, `b3os routine run` using the live stack, and everything stopped on SIGTERM."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import loopback
import pytest
from sqlmodel import Session
from workers import PATIENCE_S

from api.db import make_engine
from api.models import Node
from cli.stack import _descendants, port_taken

from .stacktest import (
    DEV_PORT_FLAGS,
    REPO,
    Dev,
    Procs,
    clean_env,
    free_port,
    issued_credential,
    node_status,
    running,
    running_dev,
    start_node,
    wait_until,
)
from .stacktest import b3os_process as _b3os

HELLO = REPO / "examples" / "routines" / "hello.yaml"
PORT_FLAGS = DEV_PORT_FLAGS


@pytest.fixture(scope="module")
def dev() -> Iterator[Dev]:
    with running_dev() as d:
        yield d


def test_dev_says_where_the_api_the_temporal_ui_and_dev_env_are(dev: Dev) -> None:
    api, ui = f"http://127.0.0.1:{dev.ports['--port']}", f"http://127.0.0.1:{dev.ports['--ui-port']}"
    text = "\n".join(dev.lines)
    assert f"api      {api}" in text and f"UI {ui}" in text and str(dev.data_dir / "dev.env") in text
    assert "published com.example.tools/echo/echo@1.0.0" in dev.lines
    assert "published io.b3os/open-meteo/search-places@1.0.0" in dev.lines  # a declarative example pack
    assert "published io.b3os/github/get-issue@1.0.0" in dev.lines
    assert loopback.get(f"{api}/healthz").status_code == 200
    egress = f"http://127.0.0.1:{dev.ports['--egress-port']}"
    assert loopback.get(f"{egress}/healthz").json() == {"ok": True}
    assert loopback.get(ui, timeout=10).status_code == 200


def test_dev_env_holds_the_shared_tokens_mode_0600_and_they_are_never_printed(dev: Dev) -> None:
    assert (dev.data_dir / "dev.env").stat().st_mode & 0o777 == 0o600
    values = dev.dev_env
    names = ("B3OS_API_KEY", "B3OS_NODE_CREDENTIAL", "B3OS_WORKER_TOKEN", "B3OS_EGRESS_TOKEN")
    secrets = [values[k] for k in names]
    assert all(len(s) >= 32 for s in secrets) and len(set(secrets)) == 4
    assert values["B3OS_EGRESS_URL"] == f"http://127.0.0.1:{dev.ports['--egress-port']}"
    assert values["B3OS_TEMPORAL_ADDRESS"] == f"127.0.0.1:{dev.ports['--temporal-port']}"
    printed = "\n".join(dev.lines) + "".join(
        p.read_text(errors="replace") for p in dev.data_dir.glob("logs/*")
    )
    assert not any(s in printed for s in secrets)


def test_each_part_gets_only_the_secrets_it_uses(dev: Dev) -> None:
    secrets = ("B3OS_WORKER_TOKEN", "B3OS_EGRESS_TOKEN", "B3OS_EGRESS_KEY_FILE", "B3OS_NODE_CREDENTIAL")
    parts = {
        "server start-dev": "temporal",
        "egress run": "egress",
        "api.main:create_app": "api",
        "node run": "node",
        "engine.worker": "worker",
    }
    held: dict[str, set[str]] = {}
    for pid in _descendants({dev.process.pid}):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        names = {line.partition(b"=")[0].decode() for line in environ}
        for words, part in parts.items():
            if words in cmdline and "nice" not in cmdline:
                held.setdefault(part, set()).update(names & set(secrets))
    assert held == {
        "temporal": set(),
        "egress": {"B3OS_EGRESS_TOKEN", "B3OS_EGRESS_KEY_FILE"},
        "api": {"B3OS_WORKER_TOKEN", "B3OS_EGRESS_TOKEN"},
        "node": {"B3OS_NODE_CREDENTIAL"},
        "worker": {"B3OS_WORKER_TOKEN"},
    }


def test_the_node_installed_the_echo_tool_from_the_api_feed(dev: Dev) -> None:
    node = f"http://127.0.0.1:{dev.ports['--node-port']}"
    assert dev.dev_env["B3OS_NODE_ID"] == f"node-127.0.0.1-{dev.ports['--node-port']}"
    status = node_status(node, dev.dev_env)
    assert status.status_code == 200, status.text
    installed = status.json()["installed"]
    # the packs with code that `b3os dev` publishes: the echo tool, and github's js action once installed
    assert "com.example.tools/echo@1.0.0" in installed
    assert set(installed) <= {"com.example.tools/echo@1.0.0", "io.b3os/github@1.0.0"}, installed
    tool = (
        dev.data_dir
        / "node"
        / "cache"
        / "com.example.tools"
        / "echo"
        / "1.0.0"
        / "tool"
        / "bin"
        / "echo-tool"
    )
    assert tool.is_file()


def test_routine_run_uses_the_live_stack_of_dev_env(dev: Dev) -> None:
    done = _b3os(dev.root, dev.env, "routine", "run", str(HELLO), "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "no stack is running" not in done.stderr
    run = json.loads(done.stdout)
    assert (
        run["status"] == "succeeded" and run["outputs"]["greeting"] == "hello world, again (3 friends next)"
    )


def test_a_second_node_started_by_hand_with_dev_env_joins_the_same_api(dev: Dev) -> None:
    procs = Procs(dev.root)
    port = free_port()
    issued = _b3os(dev.root, dev.env, "node", "credential", "issue", f"node-127.0.0.1-{port}")
    assert issued.returncode == 0, issued.stderr
    env = {**dev.env, **dev.dev_env, **issued_credential(issued.stdout)}
    start_node(procs, env, f"node-127.0.0.1-{port}", port)
    engine = make_engine(f"sqlite:///{dev.data_dir / 'b3os.db'}")
    try:

        def joined() -> bool:
            with Session(engine) as session:
                node = session.get(Node, f"node-127.0.0.1-{port}")
                return node is not None and "com.example.tools/echo@1.0.0" in node.installed

        wait_until("the second node joining", joined, 60.0, procs.log(f"node-127.0.0.1-{port}"))
        procs.stop()
        with Session(engine) as session:
            left = session.get(Node, f"node-127.0.0.1-{port}")
        # a node that stops says so: the api places no call on it while its last heartbeat is still fresh
        assert left is not None and left.installed == [] and left.slots_free == 0
    finally:
        procs.stop()
        engine.dispose()


def test_a_taken_port_is_refused_with_a_sentence_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = clean_env(B3OS_KEYS_DIR=str(tmp_path / "keys"), B3OS_DEV_TEMPORAL_PORT=str(port))
        done = _b3os(
            tmp_path,
            env,
            "dev",
            *(a for f in PORT_FLAGS if f != "--temporal-port" for a in (f, str(free_port()))),
        )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"b3os dev: port {port} on 127.0.0.1 (for Temporal) is taken: is a stack already running "
        "(b3os dev)? Stop what uses it, or choose another port with --temporal-port or "
        "B3OS_DEV_TEMPORAL_PORT."
    )
    assert not (tmp_path / ".b3os" / "logs").exists()


def test_a_port_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    done = _b3os(tmp_path, clean_env(B3OS_DEV_NODE_PORT="eighty"), "dev")
    assert done.returncode == 1
    assert done.stderr.strip() == "b3os dev: B3OS_DEV_NODE_PORT 'eighty' is not a port number (1 to 65535)"


def test_a_temporal_synchronous_setting_that_is_not_known_is_refused(tmp_path: Path) -> None:
    done = _b3os(tmp_path, clean_env(B3OS_TEMPORAL_SYNCHRONOUS="sometimes"), "dev")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "b3os dev: B3OS_TEMPORAL_SYNCHRONOUS must be one of normal, full, not 'sometimes'"
    )


def test_temporals_file_is_sqlite_in_wal_mode(dev: Dev) -> None:
    """WAL with synchronous=normal: a commit does not wait for the disk (engine.temporal_server)."""
    with contextlib.closing(sqlite3.connect(f"file:{dev.data_dir / 'temporal.db'}?mode=ro", uri=True)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert (dev.data_dir / "temporal.db-wal").stat().st_mode & 0o777 == 0o600


def test_the_data_dirs_files_are_readable_by_their_owner_only(dev: Dev) -> None:
    data = dev.data_dir
    assert data.stat().st_mode & 0o777 == 0o711  # the node's VM users pass through; nobody lists it
    private = [data / "dev.env", data / "b3os.db", data / "temporal.db", *data.glob("logs/*.log")]
    private += [p for p in (data / "blobs").rglob("*") if p.is_file()]
    assert len(private) > 8
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in private if p.stat().st_mode & 0o077} == {}
    dirs = [data / "logs", data / "blobs", *[p for p in (data / "blobs").rglob("*") if p.is_dir()]]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in dirs if p.stat().st_mode & 0o077} == {}
    egress_key = data / "egress" / "egress.key"
    assert egress_key.stat().st_mode & 0o777 == 0o600


def test_a_signed_github_delivery_starts_the_example_routine_once(dev: Dev) -> None:
    headers = {"Authorization": f"Bearer {dev.dev_env['B3OS_API_KEY']}"}
    source = (REPO / "examples" / "routines" / "issue-triage.yaml").read_text()
    stored = loopback.request(
        "POST", f"{dev.api_url}/v1/routines", headers=headers, json={"yaml": source}, timeout=120
    )
    assert stored.status_code == 201, stored.text
    listed = loopback.request(
        "GET", f"{dev.api_url}/v1/triggers/subscriptions?routine=issue-triage", headers=headers
    )
    (sub,) = listed.json()["subscriptions"]
    body = json.dumps(
        {
            "action": "opened",
            "issue": {
                "number": 12,
                "title": "Dev crash",
                "body": None,
                "html_url": "https://github.com/o/r/issues/12",
                "user": {"login": "ada"},
                "labels": [],
            },
            "repository": {"full_name": "o/r"},
        }
    ).encode()
    digest = hmac.new(sub["webhook_secret"].encode(), body, hashlib.sha256).hexdigest()
    signed = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "dev-1",
        "X-Hub-Signature-256": f"sha256={digest}",
    }
    for expected in ("pending", "duplicate"):  # GitHub's redelivery of the same delivery starts nothing
        r = loopback.request("POST", sub["hook_url"], content=body, headers=signed, timeout=30)
        assert r.status_code == 202, r.text
        assert [d["status"] for d in r.json()["deliveries"]] == [expected]

    def run_of_delivery() -> str | None:
        got = loopback.request(
            "GET", f"{dev.api_url}/v1/triggers/subscriptions/{sub['id']}/deliveries", headers=headers
        )
        return next((d["run_id"] for d in got.json()["deliveries"] if d["run_id"]), None)

    wait_until("the delivery started no run", lambda: run_of_delivery() is not None)
    run_id = run_of_delivery()
    run = loopback.request(
        "GET", f"{dev.api_url}/v1/runs/{run_id}?wait_s=30", headers=headers, timeout=60
    ).json()
    assert run["status"] == "succeeded", run
    assert run["outputs"] == {"note": "triage: #12 Dev crash by ada (https://github.com/o/r/issues/12)"}
    runs = loopback.request("GET", f"{dev.api_url}/v1/runs?routine=issue-triage", headers=headers).json()[
        "runs"
    ]
    assert [r["run_id"] for r in runs] == [run_id]


# last: it stops the module's stack
def test_sigterm_stops_every_child_and_their_children(dev: Dev) -> None:
    children = _descendants({dev.process.pid})
    assert len(children) >= 4
    dev.process.send_signal(signal.SIGTERM)
    assert dev.process.wait(timeout=30) == 0
    deadline = time.monotonic() + PATIENCE_S
    while left := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"processes {left} outlived b3os dev"
        time.sleep(0.02)
    assert [port for port in dev.ports.values() if port_taken(port)] == []
