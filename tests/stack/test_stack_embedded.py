"""The embedded stack started for one command: `b3os demo` (what `make run` runs) and `b3os routine run`
with no stack running. Each starts Temporal, the api, a node and the worker on free ports and stops them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from cli._http import read_env_file
from cli.stack import port_taken

from .stacktest import clean_env, free_port

FAILING = """\
name: failing
steps:
  - id: hello
    uses: com.example.tools/echo/echo@1
    with: {text: hi}
  - id: boom
    uses: com.example.tools/echo/fail@1
    with: {mode: tool_error, code: no_luck, message: the tool failed as asked}
"""


def _ports_env(tmp_path: Path) -> tuple[dict[str, str], list[int]]:
    ports = {name: free_port() for name in ("API", "NODE", "TEMPORAL", "UI", "EGRESS")}
    env = clean_env(
        B3OS_KEYS_DIR=str(tmp_path / "keys"), **{f"B3OS_DEV_{n}_PORT": str(p) for n, p in ports.items()}
    )
    return env, list(ports.values())


def test_demo_runs_hello_prints_each_step_the_outputs_and_the_temporal_link_then_stops(
    tmp_path: Path,
) -> None:
    os.chmod(tmp_path, 0o711)
    env, ports = _ports_env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    steps = [ln.split(" (1 attempt")[0] for ln in lines if ln.startswith("✓")]
    assert steps == ["✓ Greet, with a file (greet)", "✓ again", "✓ last", "✓ friends", "✓ done"]
    assert '  "greeting": "hello world, again (3 friends next)",' in lines
    ui = ports[3]
    links = [ln for ln in lines if ln.startswith("Temporal UI: ")]
    assert len(links) == 1
    assert re.fullmatch(
        rf"Temporal UI: http://127\.0\.0\.1:{ui}/namespaces/default/workflows/routine-hello-run_[0-9a-z]+",
        links[0],
    )
    assert lines[-1] == f"stack stopped; logs in {tmp_path / '.b3os' / 'logs'}"
    assert [p for p in ports if port_taken(p)] == []


def test_routine_run_with_no_stack_starts_one_for_the_command_and_fails_with_the_steps_sentence(
    tmp_path: Path,
) -> None:
    os.chmod(tmp_path, 0o711)
    env, ports = _ports_env(tmp_path)
    (tmp_path / "failing.yaml").write_text(FAILING)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "routine", "run", "failing.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    err = done.stderr.splitlines()
    assert err[0] == "no stack is running: starting the embedded one for this command..."
    assert err[1].startswith("embedded stack ready in ") and err[1].endswith(
        "it stops when this command ends"
    )
    assert re.fullmatch(
        r"run run_[0-9a-z]+ failed: step boom: tool_failed \(tool_error\): .*the tool failed as asked.*",
        err[-1],
    ), err
    assert '✓ hello (1 attempt): {"text": "hi"}' in done.stdout.splitlines()
    assert read_env_file(tmp_path / ".b3os" / "dev.env")["B3OS_API_URL"] == f"http://127.0.0.1:{ports[0]}"
    assert [p for p in ports if port_taken(p)] == []
