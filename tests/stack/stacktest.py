"""Helpers of the stack tests: free ports, child processes, the CLI run in-process, polling."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cli.main import main as b3os_main
from node.credential import call_key, signed_headers
from node.vm.stale import cleanup_stale

REPO = Path(__file__).resolve().parents[2]
ECHO_DIR = REPO / "examples" / "tools" / "echo"
NAMESPACE = "com.example.tools"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any B3OS_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_") and k != "DATABASE_URL"}
    env.update(extra)
    return env


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
    argv = [sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    popen = procs.start(f"api-{port}", argv, env)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert popen.poll() is None, procs.log(f"api-{port}").read_text()
        try:
            return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
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
    return httpx.get(f"{url}{path}", headers=headers, timeout=10)


def start_node(procs: Procs, env: Mapping[str, str], node_id: str, port: int) -> subprocess.Popen[bytes]:
    """Start `b3os node run --port PORT` with its own cache and run dir under the procs' root (`env` holds
    the node's credential, B3OS_NODE_CREDENTIAL)."""
    run_dir = procs.root / f"{node_id}-vms"
    run_dir.mkdir(mode=0o711, exist_ok=True)
    os.chmod(run_dir, 0o711)  # the VM's uid must reach its directory below
    node_env = {
        **env,
        "B3OS_NODE_ID": node_id,
        "B3OS_HEARTBEAT_S": "0.5",
        "B3OS_CACHE_DIR": str(procs.root / f"{node_id}-cache"),
        "B3OS_RUN_DIR": str(run_dir),
    }
    argv = [sys.executable, "-m", "cli", "node", "run", "--port", str(port)]
    return procs.start(node_id, argv, node_env)
