"""Traces across real processes: `b3os routine run` (the CLI's span) -> the api -> Temporal (the
workflow's and the activity's spans, in the worker) -> the api's call -> the node, one trace id, every
process writing its spans to one file (`B3OS_OTEL_EXPORTER=file`); its log lines carry that id. With
tracing off (the session's stack), nothing is exported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from realstack import RoutineStack
from temporalio.testing import WorkflowEnvironment
from workers import PATIENCE_S

from api.db import make_engine

from .stack import ECHO, FREE, PRICEY, REPO, publish_echo_variants

ROUTINE = f"""
name: traced
steps:
  - id: say
    uses: {ECHO}/echo@1
    with:
      text: traced
"""


@dataclass
class TracedStack(RoutineStack):
    """A routine stack whose processes all export spans to `spans`."""

    spans: Path = Path()

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(B3OS_OTEL_EXPORTER="file", B3OS_OTEL_FILE=str(self.spans), **extra)


@pytest.fixture(scope="module")
def traced(temporal_env: WorkflowEnvironment) -> Iterator[TracedStack]:
    root = Path(tempfile.mkdtemp(prefix="b3os-traces-"))
    os.chmod(root, 0o711)
    (root / "state").mkdir()
    db_url = f"sqlite:///{root / 'state' / 'b3os.db'}"
    stack = TracedStack(
        root=root,
        db_url=db_url,
        engine=make_engine(db_url),
        temporal=temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        queue=f"test-traces-{os.getpid()}-{time.monotonic_ns()}",
        client=temporal_env.client,
        spans=root / "spans.jsonl",
    )
    try:
        stack.start_api()
        publish_echo_variants(stack)
        stack.start_node("node-t")
        stack.worker = stack.start_worker()
        stack.wait_installed("node-t", [f"{p}@1.0.0" for p in (ECHO, PRICEY, FREE)])
        yield stack
    finally:
        stack.stop()
        shutil.rmtree(root)


def spans_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_routine_run_is_one_trace_from_the_cli_through_temporal_to_the_node(traced: TracedStack) -> None:
    org = traced.runner()
    source = traced.root / "traced.yaml"
    source.write_text(ROUTINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(
        B3OS_API_URL=traced.url,
        B3OS_API_KEY=org.key,
        B3OS_OTEL_EXPORTER="file",
        B3OS_OTEL_FILE=str(traced.spans),
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, "-m", "cli", "routine", "run", str(source), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    roots = [s for s in spans_of(traced.spans) if s["name"] == "b3os routine run"]
    assert len(roots) == 1, roots
    trace_id = roots[0]["trace_id"]
    deadline = (
        time.monotonic() + PATIENCE_S
    )  # the node's and the worker's last spans end just after the answer
    while True:
        mine = [s for s in spans_of(traced.spans) if s["trace_id"] == trace_id]
        names = {(s["service"], s["name"]) for s in mine}
        wanted = {
            ("b3os-cli", "b3os routine run"),
            ("b3os-api", "POST /v1/routines/{name}/runs"),
            ("b3os-api", "StartWorkflow:routine"),
            ("b3os-worker", "RunWorkflow:routine"),
            ("b3os-worker", "StartActivity:call_action"),
            ("b3os-worker", "RunActivity:call_action"),
            ("b3os-api", "POST /v1/actions/call"),
            ("b3os-node", "POST /v1/node/calls"),
        }
        if wanted <= names or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert wanted <= names, sorted(names)
    ids = {s["span_id"] for s in mine}
    assert all(s["parent_id"] in ids for s in mine if s["span_id"] != roots[0]["span_id"]), (
        "a span's parent is outside the trace"
    )
    assert {s["trace_id"] for s in spans_of(traced.spans) if s["service"] == "b3os-node"} == {trace_id}


def test_with_tracing_off_no_span_is_exported(stack: RoutineStack, tmp_path: Path) -> None:
    org = stack.org()
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=stack.url, B3OS_API_KEY=org.key, PYTHONPATH=str(REPO))
    env["B3OS_OTEL_FILE"] = str(tmp_path / "spans.jsonl")  # no B3OS_OTEL_EXPORTER: off
    done = subprocess.run(
        [sys.executable, "-m", "cli", "call", f"{ECHO}/echo@1", "--input", '{"text": "hi"}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "spans.jsonl").exists()
    api_log = next(p for p in stack.procs if p.name.startswith("api-")).log.read_text()
    assert "traceparent" not in api_log


LOGGING = """
import logging, sys
from opentelemetry import trace
from telemetry import logs, tracing
tracing.setup("test")
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
logs.install()
log = logging.getLogger("b3os.test")
log.warning("outside")
with trace.get_tracer("t").start_as_current_span("s") as span:
    log.warning("inside")
    print("ID", format(span.get_span_context().trace_id, "032x"))
"""


@pytest.mark.parametrize("exporter", ["console", "none"])
def test_every_log_line_carries_the_trace_id(exporter: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_OTEL_EXPORTER=exporter, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", LOGGING], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    trace_id = next(line.split()[1] for line in lines if line.startswith("ID "))
    assert "WARNING outside trace_id=-" in lines
    if exporter == "none":
        assert trace_id == "0" * 32 and "WARNING inside trace_id=-" in lines
        assert '"trace_id"' not in done.stdout + done.stderr  # no span printed
    else:
        assert f"WARNING inside trace_id={trace_id}" in lines
