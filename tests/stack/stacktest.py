"""Helpers of the stack tests: free ports, child processes, the CLI run in-process, polling, `b3os dev`
started as a user starts it."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import loopback
import pytest
from workers import DEV_VM_UID_BASE, free_port

from cli._http import read_env_file
from cli.main import main as b3os_main
from http1.server import SERVER_PROTOCOL
from node.credential import call_key, signed_headers
from node.vm import mounts
from node.vm.stale import cleanup_stale

REPO = Path(__file__).resolve().parents[2]
ECHO_DIR = REPO / "examples" / "tools" / "echo"
NAMESPACE = "com.example.tools"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any B3OS_* setting but this test worker's VM uids (for the nodes
    the stacks start), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_") and k != "DATABASE_URL"}
    env["B3OS_VM_UID_BASE"] = str(DEV_VM_UID_BASE)
    env.update(extra)
    return env


def running(pid: int) -> bool:
    """Whether process `pid` still runs. A zombie has ended: it waits for its reaper, and under the
    suite that may be pytest (a node driver made it a child subreaper), which reaps only its own."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_until(
    what: str, check: Callable[[], bool], timeout_s: float = 60.0, log: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"{what} did not happen within {timeout_s} s\n{tail}")


def cli(env: Mapping[str, str], *argv: str) -> tuple[int, str, str]:
    """Run `b3os ARGV` in this process with exactly `env` as its B3OS_* environment."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for name in [k for k in os.environ if k.startswith("B3OS_") or k == "DATABASE_URL"]:
            mp.delenv(name)
        for name, value in env.items():
            if name.startswith("B3OS_"):
                mp.setenv(name, value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = b3os_main(list(argv))
    return code, out.getvalue(), err.getvalue()


@dataclass
class Procs:
    """Processes a test started, stopped in reverse order."""

    root: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        with (self.root / f"{name}.log").open("wb") as out:
            popen = subprocess.Popen(
                list(argv), env=dict(env), cwd=REPO, stdout=out, stderr=subprocess.STDOUT
            )
        self.procs.append((name, popen))
        return popen

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def stop(self) -> None:
        for _, popen in reversed(self.procs):
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        for _, popen in reversed(self.procs):
            try:
                popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=5)
        self.procs.clear()
        for run_dir in self.root.glob("*-vms"):  # what a node that had to be killed left
            cleanup_stale(run_dir)


def start_api(procs: Procs, env: Mapping[str, str], port: int) -> str:
    """Start the api (uvicorn, the real factory) and wait for /healthz."""
    argv = [sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--http", SERVER_PROTOCOL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    popen = procs.start(f"api-{port}", argv, env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert popen.poll() is None, procs.log(f"api-{port}").read_text()
        try:
            return loopback.get(f"{url}/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until("the api answering /healthz", healthy, 30.0)
    return url


def issued_credential(printed: str) -> dict[str, str]:
    """B3OS_NODE_ID and B3OS_NODE_CREDENTIAL from what `b3os node credential issue` printed."""
    return dict(
        line.split("=", 1)
        for line in printed.splitlines()
        if line.startswith(("B3OS_NODE_ID=", "B3OS_NODE_CREDENTIAL="))
    )


def issue_node_credential(env: Mapping[str, str], node_id: str) -> dict[str, str]:
    """`b3os node credential issue NODE_ID` on the database of `env` (B3OS_DATA_DIR or B3OS_DATABASE_URL)."""
    assert env.get("B3OS_DATA_DIR") or env.get("B3OS_DATABASE_URL"), "which database?"
    code, printed, err = cli(env, "node", "credential", "issue", node_id)
    assert code == 0, err
    return issued_credential(printed)


def node_status(url: str, credential: Mapping[str, str]) -> httpx.Response:
    """GET a node's /v1/node/status with the api's proof (as the api signs its requests to that node)."""
    key = call_key(credential["B3OS_NODE_CREDENTIAL"])
    node_id, path = credential["B3OS_NODE_ID"], "/v1/node/status"
    headers = signed_headers(key, node_id=node_id, method="GET", path=path, body=b"")
    return loopback.get(f"{url}{path}", headers=headers, timeout=10)


def start_node(procs: Procs, env: Mapping[str, str], node_id: str, port: int) -> subprocess.Popen[bytes]:
    """Start `b3os node run --port PORT` with its own cache and run dir under the procs' root (`env` holds
    the node's credential, B3OS_NODE_CREDENTIAL)."""
    run_dir = procs.root / f"{node_id}-vms"
    run_dir.mkdir(mode=0o711, exist_ok=True)
    os.chmod(run_dir, 0o711)  # the VM's uid must reach its directory below
    node_env = {
        **env,
        "B3OS_NODE_ID": node_id,
        "B3OS_HEARTBEAT_S": "1",
        "B3OS_CACHE_DIR": str(procs.root / f"{node_id}-cache"),
        "B3OS_RUN_DIR": str(run_dir),
    }
    argv = [sys.executable, "-m", "cli", "node", "run", "--port", str(port)]
    return procs.start(node_id, argv, node_env)


DEV_PORT_FLAGS = ("--port", "--node-port", "--egress-port", "--temporal-port", "--ui-port")


@dataclass
class Dev:
    """A running `b3os dev` (its stdout and stderr lines, as they come)."""

    root: Path
    process: subprocess.Popen[str]
    ports: dict[str, int]
    env: dict[str, str]
    lines: list[str] = field(default_factory=list)
    err_lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def data_dir(self) -> Path:
        return self.root / ".b3os"

    @property
    def dev_env(self) -> dict[str, str]:
        return read_env_file(self.data_dir / "dev.env")

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['--port']}"


def b3os_process(
    root: Path, env: Mapping[str, str], *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run `b3os ARGS` as its own process in `root`."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=root,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _read_lines(pipe: Iterator[str], into: list[str], ready: threading.Event | None) -> None:
    for line in pipe:
        into.append(line.rstrip("\n"))
        if ready is not None and line.startswith("ready:"):
            ready.set()
    if ready is not None:
        ready.set()


@contextlib.contextmanager
def running_dev(prefix: str = "b3os-dev-", **extra_env: str) -> Iterator[Dev]:
    """`b3os dev` on free loopback ports in a fresh directory (`extra_env` in its environment), ready;
    SIGTERM at the end, then the directory removed (its node has removed its VMs' mounts by then)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o711)
    ports = {flag: free_port() for flag in DEV_PORT_FLAGS}
    env = clean_env(B3OS_KEYS_DIR=str(root / "keys"), **extra_env)
    flags = [a for flag, port in ports.items() for a in (flag, str(port))]
    argv = [sys.executable, "-m", "cli", "dev", *flags]
    process = subprocess.Popen(
        argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    dev = Dev(root=root, process=process, ports=ports, env=env)
    readers = [
        threading.Thread(target=_read_lines, args=(process.stdout, dev.lines, dev.ready), daemon=True),
        threading.Thread(target=_read_lines, args=(process.stderr, dev.err_lines, None), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        ready = dev.ready.wait(120) and dev.lines and dev.lines[-1].startswith("ready:")
        if not ready:
            _terminate(process)
            for reader in readers:
                reader.join(timeout=10)
            raise AssertionError(f"b3os dev did not start: {dev.lines}\n{dev.err_lines}")
        yield dev
    finally:
        _terminate(process)
        for reader in readers:
            reader.join(timeout=10)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        assert mounts.mounts_under(root) == [], "b3os dev left mounts behind"
        shutil.rmtree(root)


def _terminate(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
