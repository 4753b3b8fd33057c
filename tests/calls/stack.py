"""A real stack for the call tests: api processes (uvicorn) on one SQLite file, a node process (bwrap
VMs), the echo tool published three ways (priced as shipped, at 1 USD, and free), and a real egress
proxy (`b3os egress run`) in front of loopback HTTPS stand-ins of the declarative packs' hosts (a test
CA; the proxy reaches them under their real names through B3OS_EGRESS_CONNECT_TO), with the example
declarative packs and tests/calls/packs/probe published."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import loopback
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine
from sqlmodel import Session, col, select
from workers import PATIENCE_S, STACK_VM_UID_BASE, UIDS_PER_WORKER, free_port

from api.accounts import node_credentials, organizations
from api.accounts.scopes import OWNER_SCOPES
from api.db import make_engine
from api.models import Node
from api.registry import publishers
from b3os import B3OS
from cli.stack_options import api_argv
from cli.tool_publish import publish_dir
from node.config import Settings as NodeSettings
from node.template import build_base
from node.vm.stale import cleanup_stale
from packs.build import build_pack
from packs.signing import public_key_b64

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "egress"))
from servers import ProxyProcess, Upstream, make_ca, proxy_env, start_proxy, write_ca  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ECHO_DIR = REPO / "examples" / "tools" / "echo"
NAMESPACE = "com.example.tools"
KID = f"{NAMESPACE}#calls-test"
WORKER_TOKEN = "worker-token-calls-test"
ECHO = f"{NAMESPACE}/echo"
PRICEY = f"{NAMESPACE}/pricey"
FREE = f"{NAMESPACE}/free"
PROBE = f"{NAMESPACE}/probe"
FIRST_PARTY = "io.b3os"
FIRST_PARTY_KID = f"{FIRST_PARTY}#calls-test"
CALLER_SCOPES = ("actions:call", "usage:read")
ROUTINE_ADMISSION_WAIT_S: str | None = "0"
"""A routine step's call is answered 429/503 at once here, as the tests of those answers expect (a test of
the wait starts an api of its own); None: the api's default (bench/goals.py)."""
UPSTREAM_HOSTS = (
    "geocoding-api.open-meteo.com",
    "api.github.com",
    "api.example.com",
    "other.example.org",
    "auth.example.com",
)
HTTP_PACKS = (
    REPO / "examples" / "packs" / "open-meteo",
    REPO / "examples" / "packs" / "github",
    REPO / "tests" / "calls" / "packs" / "probe",
    REPO / "tests" / "calls" / "packs" / "js-probe",
)


@dataclass
class Org:
    """An organization of a test and one key of it."""

    org_id: str
    key_id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass
class Proc:
    """A process this stack started."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)


@dataclass
class Stack:
    """The running stack and helpers to make organizations and call it."""

    root: Path
    db_url: str
    engine: Engine
    api_urls: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    publisher: Org | None = None
    signing_key: Ed25519PrivateKey | None = None
    egress: ProxyProcess | None = None
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    node_secrets: dict[str, str] = field(default_factory=dict)
    node_uid_ranges: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.api_urls[0]

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
        env.update(
            B3OS_DATA_DIR=str(self.root / "state"),
            B3OS_DATABASE_URL=self.db_url,
            B3OS_WORKER_TOKEN=WORKER_TOKEN,
            B3OS_NODE_HEARTBEAT_S="1",
            # every test client is 127.0.0.1: the failed-auth limit is per address (tests/api/test_api_keys)
            B3OS_AUTH_FAILURES_PER_MINUTE="100000",
        )
        if ROUTINE_ADMISSION_WAIT_S is not None:
            env["B3OS_ROUTINE_ADMISSION_WAIT_S"] = ROUTINE_ADMISSION_WAIT_S
        if self.egress is not None:
            env.update(
                B3OS_EGRESS_URL=self.egress.url,
                B3OS_EGRESS_TOKEN=self.egress.token,
                B3OS_EGRESS_PUBLIC_KEY=self.egress.public_key,
            )
        env.update(extra)
        return env

    def start_egress(self) -> None:
        """HTTPS stand-ins of UPSTREAM_HOSTS (a fresh test CA) and a real proxy that reaches them."""
        ca = make_ca()
        ca_file = write_ca(ca, self.root / "test-ca.pem")
        self.upstreams = {host: Upstream(ca, [host]) for host in UPSTREAM_HOSTS}
        (self.root / "egress").mkdir(exist_ok=True)
        self.egress = start_proxy(proxy_env(ca_file, *self.upstreams.values()), self.root / "egress")

    def start(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Proc:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(list(argv), env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def start_api(self, *, extra_env: dict[str, str] | None = None, listed: bool = True) -> tuple[str, Proc]:
        """Start one more api process on the stack's database (listed ones are in `api_urls`)."""
        port = free_port()
        argv = api_argv(port)
        proc = self.start(f"api-{port}", argv, self.env(**(extra_env or {})))
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/healthz", proc)
        if listed:
            self.api_urls.append(url)
        return url, proc

    def start_node(
        self, node_id: str, *, api_url: str | None = None, extra_env: dict[str, str] | None = None
    ) -> Proc:
        build_base(NodeSettings().base_dir)  # once per machine (about a minute); a no-op after
        port = free_port()
        run_dir = self.root / f"{node_id}-vms"
        run_dir.mkdir(mode=0o711, exist_ok=True)
        os.chmod(run_dir, 0o711)
        env = self.env(
            B3OS_API_URL=api_url or self.url,
            B3OS_VM_UID_BASE=str(self.vm_uid_base(node_id)),
            B3OS_NODE_ID=node_id,
            B3OS_NODE_CREDENTIAL=self.node_secret(node_id),
            B3OS_HEARTBEAT_S="1",
            B3OS_CACHE_DIR=str(self.root / f"{node_id}-cache"),
            B3OS_RUN_DIR=str(run_dir),
            **(extra_env or {}),
        )
        return self.start(node_id, [sys.executable, "-m", "cli", "node", "run", "--port", str(port)], env)

    def vm_uid_base(self, node_id: str) -> int:
        """The first VM uid of a node: 64 of this test worker's own for each node id (a node restarted keeps
        its range), so that no two nodes' VMs share a uid."""
        index = self.node_uid_ranges.setdefault(node_id, len(self.node_uid_ranges))
        return STACK_VM_UID_BASE + 64 * (index % (UIDS_PER_WORKER // 2 // 64))

    def node_secret(self, node_id: str) -> str:
        """A node's credential, issued on first use (as `b3os node credential issue` does)."""
        if node_id not in self.node_secrets:
            with Session(self.engine) as session:
                _, self.node_secrets[node_id] = node_credentials.issue_credential(session, node_id=node_id)
                session.commit()
        return self.node_secrets[node_id]

    def stop(self) -> None:
        """SIGTERM every process (a node then removes its VMs' mounts, cgroups and dirs), then remove what a
        node that had to be killed left."""
        for proc in reversed(self.procs):
            proc.stop()
        if self.egress is not None:
            self.egress.stop()
        for upstream in self.upstreams.values():
            upstream.close()
        for run_dir in self.root.glob("*-vms"):
            cleanup_stale(run_dir)
        self.engine.dispose()

    def org(
        self, *, scopes: Sequence[str] = CALLER_SCOPES, cap: int | None = None, namespaces: Sequence[str] = ()
    ) -> Org:
        """A fresh organization with one key."""
        with Session(self.engine) as session:
            org = organizations.create_organization(session, name=f"org {uuid.uuid4().hex[:6]}")
            key, secret = organizations.create_api_key(
                session, org_id=org.id, scopes=scopes, monthly_spend_cap_microusd=cap
            )
            for namespace in namespaces:
                publishers.set_publisher(session, namespace=namespace, org_id=org.id)
            session.commit()
            return Org(org.id, key.id, secret)

    def add_key(self, org: Org, *, cap: int | None = None, scopes: Sequence[str] = CALLER_SCOPES) -> Org:
        with Session(self.engine) as session:
            key, secret = organizations.create_api_key(
                session, org_id=org.org_id, scopes=scopes, monthly_spend_cap_microusd=cap
            )
            session.commit()
            return Org(org.org_id, key.id, secret)

    def wait_installed(self, node_id: str, tags: Sequence[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        latest = [p for p in self.procs if p.name == node_id][-1:]  # a node of that id may have run before
        while time.monotonic() < deadline:
            if any(p.popen.poll() is not None for p in latest):
                break
            with Session(self.engine) as session:
                node = session.exec(select(Node).where(col(Node.node_id) == node_id)).first()
                if node is not None and all(t in node.installed for t in tags):
                    return
            time.sleep(0.1)
        logs = "\n".join(p.log.read_text()[-2000:] for p in latest)
        raise AssertionError(f"node {node_id} did not install {tags}:\n{logs}")


def wait_http(url: str, proc: Proc, timeout_s: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited:\n{proc.log.read_text()[-3000:]}")
        try:
            if loopback.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{proc.name} did not answer {url} in {timeout_s} s")


def build_variant(
    where: Path,
    key: Ed25519PrivateKey,
    *,
    pack: str,
    pricing: dict[str, Any],
    version: str = "1.0.0",
    timeout_ms: int | None = None,
) -> Path:
    """A signed copy of the echo tool under another pack name and price (and every action's timeout)."""
    root = where / f"{pack.replace('/', '_')}-{version}"
    shutil.copytree(ECHO_DIR, root)
    manifest = json.loads((root / "b3pack.json").read_text())
    manifest.update(pack=pack, version=version, pricing=pricing)
    for action in manifest["actions"] if timeout_ms is not None else []:
        action["execution"]["timeoutMs"] = timeout_ms
    (root / "b3pack.json").write_text(json.dumps(manifest))
    build_pack(root, kid=KID, private_key=key, tool=True)
    return root


def publish(stack: Stack, org: Org, root: Path) -> dict[str, Any]:
    with B3OS(stack.url, org.key) as client:
        return publish_dir(client, root, say=lambda _: None)


def publish_echo_variants(stack: Stack) -> None:
    """Make the publisher organization and its signing key; publish echo, pricey (1 USD) and free."""
    stack.publisher = stack.org(scopes=OWNER_SCOPES, namespaces=[NAMESPACE])
    key = stack.signing_key = Ed25519PrivateKey.generate()
    r = loopback.post(
        f"{stack.url}/v1/actions/publishers/{NAMESPACE}/keys",
        headers=stack.publisher.headers,
        json={"kid": KID, "public_key": public_key_b64(key)},
    )
    assert r.status_code in (200, 201), r.text
    builds = stack.root / "builds"
    builds.mkdir()
    for pack, pricing in (
        (ECHO, {"model": "per_call", "usd": "0.0001"}),
        (PRICEY, {"model": "per_call", "usd": "1"}),
        (FREE, {"model": "free"}),
    ):
        publish(stack, stack.publisher, build_variant(builds, key, pack=pack, pricing=pricing))


def publish_http_packs(stack: Stack) -> None:
    """Give the publisher io.b3os too, and publish the example declarative packs and the probe pack."""
    assert stack.publisher is not None and stack.signing_key is not None
    first_party_key = Ed25519PrivateKey.generate()
    with Session(stack.engine) as session:
        publishers.set_publisher(session, namespace=FIRST_PARTY, org_id=stack.publisher.org_id)
        publishers.register_signing_key(
            session, namespace=FIRST_PARTY, kid=FIRST_PARTY_KID, public_key=public_key_b64(first_party_key)
        )
        session.commit()
    for pack_dir in HTTP_PACKS:
        namespace = json.loads((pack_dir / "b3pack.json").read_text())["pack"].partition("/")[0]
        first = namespace == FIRST_PARTY
        kid, key = (FIRST_PARTY_KID, first_party_key) if first else (KID, stack.signing_key)
        out = stack.root / "builds" / pack_dir.name
        build_pack(pack_dir, kid=kid, private_key=key, out_dir=out)
        publish(stack, stack.publisher, out)


def start_stack(root: Path) -> Stack:
    """Start api x2 and one node on one SQLite file, publish echo, pricey and free, wait for the node."""
    os.chmod(root, 0o711)  # the VM's user must reach the node's run dir below it
    (root / "state").mkdir(parents=True)
    db_url = f"sqlite:///{root / 'state' / 'b3os.db'}"
    stack = Stack(root=root, db_url=db_url, engine=make_engine(db_url))
    try:
        stack.start_egress()
        stack.start_api()
        stack.start_api()
        publish_echo_variants(stack)
        publish_http_packs(stack)
        stack.start_node("node-a")
        stack.wait_installed("node-a", [f"{p}@1.0.0" for p in (ECHO, PRICEY, FREE)])
        return stack
    except BaseException:
        stack.stop()
        raise
