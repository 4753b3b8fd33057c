"""The CLI against a real api (uvicorn on 127.0.0.1): admin init, tool build + publish, b3os dev."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import loopback
import pytest
from apitest import ECHO, NAMESPACE, REPO
from fastapi import FastAPI, Response
from fastapi.testclient import TestClient
from workers import PATIENCE_S, free_port

from b3os import B3OS, RateLimited
from cli.main import main
from cli.stack_options import api_argv
from packs.hashing import BundleFile
from packs.loader import load_built_bundle

PINS = [f"{NAMESPACE}/echo/{a}@1.0.0" for a in ("noop", "echo", "fail")]


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the api exited while starting"
        try:
            if loopback.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer /healthz")


@pytest.fixture
def env_vars(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "B3OS_DATABASE_URL": database_url,
        "B3OS_DATA_DIR": str(tmp_path / "state"),
        "B3OS_KEYS_DIR": str(tmp_path / "keys"),
    }


@pytest.fixture
def env(env_vars: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **env_vars}


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def b3os_cli(
    env_vars: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """Run `b3os ARGS` in this process (the real command modules, no interpreter start-up per call)."""

    def run(*args: str, extra_env: dict[str, str] | None = None) -> Ran:
        for name, value in {**env_vars, **(extra_env or {})}.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        api_argv(port),
        env=env,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def b3os(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True, timeout=60
    )  # in the session's empty working directory (tests/hermetic.py): never the checkout's .b3os/dev.env


def _init(b3os_cli: Callable[..., Ran]) -> str:
    out = b3os_cli("admin", "init", "--org", "Tools", "--publisher", NAMESPACE)
    assert out.returncode == 0, out.stderr
    return next(line.split("=", 1)[1] for line in out.stdout.splitlines() if line.startswith("B3OS_API_KEY="))


def test_the_echo_tool_builds_and_publishes_through_the_cli(
    server: str, b3os_cli: Callable[..., Ran], tmp_path: Path
) -> None:
    key = _init(b3os_cli)
    kid = f"{NAMESPACE}#e2e"
    generated = b3os_cli("keys", "generate", "--kid", kid)
    assert generated.returncode == 0, generated.stderr
    public = generated.stdout.split("public key: ")[1].strip()
    headers = {"Authorization": f"Bearer {key}"}
    r = loopback.post(
        f"{server}/v1/actions/publishers/{NAMESPACE}/keys",
        headers=headers,
        json={"kid": kid, "public_key": public},
    )
    assert r.status_code == 201, r.text
    built = b3os_cli("tool", "build", str(ECHO), "--kid", kid, "--out", str(tmp_path / "echo"))
    assert built.returncode == 0, built.stderr
    cli_env = {"B3OS_API_URL": server, "B3OS_API_KEY": key}
    published = b3os_cli("tool", "publish", str(tmp_path / "echo"), extra_env=cli_env)
    assert published.returncode == 0, published.stderr
    lines = published.stdout.splitlines()
    assert lines[-3:] == PINS
    assert lines[-4].startswith(f"published {NAMESPACE}/echo@1.0.0 (sha256:")
    assert "tool.tar: uploaded" in published.stdout
    again = b3os_cli("tool", "publish", str(tmp_path / "echo"), extra_env=cli_env)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.strip() == (
        f"b3os tool publish: The version 1.0.0 of {NAMESPACE}/echo is already published: "
        "versions are immutable, publish a new version. (409 conflict)"
    )
    assert "tool.tar: already in the registry" in again.stdout
    tools = loopback.get(f"{server}/v1/actions/packs/{NAMESPACE}/echo/tools", headers=headers).json()
    assert [t["name"] for t in tools["tools"]] == ["echo__noop", "echo__echo", "echo__fail"]


def test_publish_without_a_key_or_a_server_says_why(env: dict[str, str], tmp_path: Path) -> None:
    no_key = {k: v for k, v in env.items() if k not in ("B3OS_API_KEY", "B3OS_API_URL")}
    out = b3os("tool", "publish", str(ECHO), env=no_key)
    assert out.returncode == 1 and out.stderr.startswith("b3os tool publish: No API key: set B3OS_API_KEY")
    out = b3os(
        "tool",
        "publish",
        str(ECHO),
        env={**no_key, "B3OS_API_KEY": "b3_x", "B3OS_API_URL": f"http://127.0.0.1:{free_port()}"},
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "has no tool.tar" in out.stderr or "is missing: build the pack first" in out.stderr


def test_admin_init_runs_once_then_says_how_to_add_more(b3os_cli: Callable[..., Ran]) -> None:
    _init(b3os_cli)
    again = b3os_cli("admin", "init")
    assert again.returncode == 1
    assert again.stderr.startswith(
        "b3os admin init: This installation is already initialized (operator organization"
    )
    other = b3os_cli("admin", "init", "--additional", "--org", "Other")
    assert other.returncode == 0 and "(operator)" not in other.stdout and "B3OS_API_KEY=b3_" in other.stdout


def test_concurrent_publishes_over_http_have_exactly_one_winner(
    server: str, b3os_cli: Callable[..., Ran], tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from packs.build import build_pack
    from packs.signing import public_key_b64

    key = _init(b3os_cli)
    headers = {"Authorization": f"Bearer {key}"}
    signing = Ed25519PrivateKey.generate()
    kid = f"{NAMESPACE}#race"
    loopback.post(
        f"{server}/v1/actions/publishers/{NAMESPACE}/keys",
        headers=headers,
        json={"kid": kid, "public_key": public_key_b64(signing)},
    ).raise_for_status()
    build_pack(ECHO, kid=kid, private_key=signing, out_dir=tmp_path / "echo", tool=True)
    manifest, files = load_built_bundle(tmp_path / "echo")
    for data in files.values():
        name = BundleFile.of("x", data).sha256
        loopback.put(f"{server}/v1/actions/registry/blobs/sha256:{name}", headers=headers, content=data)
    body = {"manifest": manifest, "files": [BundleFile.of(p, d).to_dict() for p, d in sorted(files.items())]}
    barrier = threading.Barrier(8)
    statuses: list[int] = []

    def attempt() -> None:
        with loopback.client(timeout=30) as client:
            barrier.wait()
            statuses.append(client.post(f"{server}/v1/actions/packs", headers=headers, json=body).status_code)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201] + [409] * 7
    issued = b3os_cli("node", "credential", "issue", "race-node")
    assert issued.returncode == 0, issued.stderr
    secret = next(
        v
        for k, _, v in (ln.partition("=") for ln in issued.stdout.splitlines())
        if k == "B3OS_NODE_CREDENTIAL"
    )
    feed = loopback.get(f"{server}/v1/nodes/registry", headers={"Authorization": f"Bearer {secret}"}).json()
    assert [v["seq"] for v in feed["versions"]] == [1]


def test_the_cli_client_waits_exactly_retry_after_then_retries() -> None:
    app = FastAPI()
    answers = iter([(503, "2"), (429, "1"), (200, None)])

    @app.get("/v1/usage")
    def thing() -> Response:
        status, retry = next(answers)
        headers = {"Retry-After": retry} if retry else {}
        body = b'{"error": {"code": "rate_limited", "message": "Slow down."}}' if retry else b"{}"
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    slept: list[float] = []
    with TestClient(app) as http:
        client = B3OS("http://testserver", "b3_k", http_client=http, sleep=slept.append)
        assert client.usage() == {}
    assert slept == [2.0, 1.0]
    answers = iter([(429, "1"), (429, "1")])
    with TestClient(app) as http:
        client = B3OS("http://testserver", "b3_k", http_client=http, sleep=slept.append, max_retries=1)
        with pytest.raises(RateLimited, match=r"^Slow down\. \(429 rate_limited\)$"):
            client.usage()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_b3os_dev_starts_publishes_the_examples_and_stops_on_sigterm(
    env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    dev_env = {k: v for k, v in env.items() if k not in ("B3OS_DATABASE_URL", "B3OS_DATA_DIR")}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli",
            "dev",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "dev"),
            *(
                a
                for flag in ("--node-port", "--egress-port", "--temporal-port", "--ui-port")
                for a in (flag, str(free_port()))
            ),
        ],
        env=dev_env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            _check_dev(process, port, tmp_path)
        finally:
            if process.poll() is None:  # a failed check: SIGTERM stops the stack's children too
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def _check_dev(process: subprocess.Popen[str], port: int, tmp_path: Path) -> None:
    assert process.stdout is not None and process.stderr is not None
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("ready"):
            break
    assert lines and lines[-1].startswith("ready"), (lines, process.stderr.read())
    declarative = [f"io.b3os/github/{a}@1.0.0" for a in ("get-issue", "create-issue", "list-open-issues")]
    declarative.append("io.b3os/open-meteo/search-places@1.0.0")
    published = [f"published {p}" for p in declarative + PINS]
    assert published == [ln for ln in lines if ln.startswith("published")]
    dev = dict(ln.split("=", 1) for ln in (tmp_path / "dev" / "dev.env").read_text().splitlines())
    assert dev["B3OS_API_URL"] == f"http://127.0.0.1:{port}" and dev["B3OS_DEV_KID"] == f"{NAMESPACE}#dev"
    assert (tmp_path / "keys" / f"{NAMESPACE}#dev.key").is_file()
    headers = {"Authorization": f"Bearer {dev['B3OS_API_KEY']}"}
    pack = loopback.get(f"{dev['B3OS_API_URL']}/v1/actions/packs/{NAMESPACE}/echo", headers=headers).json()
    assert pack["kid"] == f"{NAMESPACE}#dev" and pack["version"] == "1.0.0"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    with pytest.raises(httpx.ConnectError):
        loopback.get(f"{dev['B3OS_API_URL']}/healthz", timeout=2)


def test_a_publisher_is_set_up_with_the_cli_and_pack_publish_names_those_commands(
    server: str, b3os_cli: Callable[..., Ran], tmp_path: Path
) -> None:
    init = b3os_cli("admin", "init", "--org", "Tools")  # no --publisher: the namespace comes later
    assert init.returncode == 0, init.stderr
    key = next(ln.split("=", 1)[1] for ln in init.stdout.splitlines() if ln.startswith("B3OS_API_KEY="))
    org_id = init.stdout.split()[1]
    cli_env = {"B3OS_API_URL": server, "B3OS_API_KEY": key}
    kid = f"{NAMESPACE}#cli"
    assert b3os_cli("keys", "generate", "--kid", kid).returncode == 0
    built = b3os_cli("tool", "build", str(ECHO), "--kid", kid, "--out", str(tmp_path / "echo"))
    assert built.returncode == 0, built.stderr

    refused = b3os_cli("pack", "publish", str(tmp_path / "echo"), extra_env=cli_env)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"b3os pack publish: The namespace {NAMESPACE} is not your organization's in the publisher list: "
        f"an operator gives it to your organization with `b3os publisher add {NAMESPACE} --org <your "
        f"organization id>` (or `b3os publisher add {NAMESPACE}` with a key of the operator organization) "
        "(403 forbidden)"
    )
    added = b3os_cli("publisher", "add", NAMESPACE, extra_env=cli_env)
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[0] == f"publisher {NAMESPACE} is organization {org_id}'s"

    refused = b3os_cli("pack", "publish", str(tmp_path / "echo"), extra_env=cli_env)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"b3os pack publish: The kid {kid} is not registered for the namespace {NAMESPACE}: register its "
        f"public key with `b3os publisher key add {NAMESPACE} --kid {kid}` (403 forbidden)"
    )
    registered = b3os_cli("publisher", "key", "add", NAMESPACE, "--kid", kid, extra_env=cli_env)
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout.strip() == (
        f"kid {kid} registered for {NAMESPACE}: packs signed with it can be published"
    )
    again = b3os_cli("publisher", "key", "add", NAMESPACE, "--kid", kid, extra_env=cli_env)
    assert again.returncode == 0, again.stderr  # the same key again is a no-op

    published = b3os_cli("pack", "publish", str(tmp_path / "echo"), extra_env=cli_env)
    assert published.returncode == 0, published.stderr
    assert published.stdout.splitlines()[-3:] == PINS


def test_publisher_commands_refuse_with_the_apis_sentence(
    server: str, b3os_cli: Callable[..., Ran], tmp_path: Path
) -> None:
    _init(b3os_cli)
    other = b3os_cli("admin", "init", "--additional", "--org", "Other")
    other_key = next(x.split("=", 1)[1] for x in other.stdout.splitlines() if x.startswith("B3OS_API_KEY="))
    other_env = {"B3OS_API_URL": server, "B3OS_API_KEY": other_key}
    not_operator = b3os_cli("publisher", "add", "com.other.tools", extra_env=other_env)
    assert not_operator.returncode == 1 and "Traceback" not in not_operator.stderr
    assert not_operator.stderr.startswith(
        "b3os publisher add: Only a key of the operator organization (made by b3os admin init) edits the "
        "publisher list. (403 forbidden)"
    )
    kid = f"{NAMESPACE}#elsewhere"
    (tmp_path / "key.pub").write_text("not base64 of a key\n")
    bad_key = b3os_cli(
        "publisher", "key", "add", NAMESPACE, "--kid", kid, "--public-key", str(tmp_path / "key.pub"),
        extra_env=other_env,
    )  # fmt: skip
    assert bad_key.returncode == 1
    assert bad_key.stderr.startswith("b3os publisher key add: Your organization has no publisher namespace")
    no_file = b3os_cli("publisher", "key", "add", NAMESPACE, "--kid", kid, extra_env=other_env)
    assert no_file.returncode == 1 and no_file.stderr.startswith(
        f"b3os publisher key add: no public key for {kid} in "
    )
    assert no_file.stderr.rstrip().endswith(": pass it with --public-key or generate the key")
