"""`b3os routine run` as a user runs it: a real process, a real api on uvicorn, Temporal and a worker.

The worker's calls go to the STAND-IN api of tests/activities/stand_in_api.py, which scripts a
failing step; the real POST /v1/actions/call and a node are exercised in test_workflow_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from pydantic import SecretStr
from sqlmodel import Session
from temporalio.testing import WorkflowEnvironment

from activities.call_action import ActionActivities
from activities.config import ActivitySettings
from api import accounts
from api.config import Settings
from api.main import create_app
from engine.worker import build_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "activities"))  # the stand-in's module
from stand_in_api import StandInApi, problem  # noqa: E402

FLAKY = "com.example.tools/flaky/run@1"
ROUTINE = """\
name: greet-all
inputs:
  who: {type: string}
  names: {type: array, default: [a, b]}
  loud: {type: boolean, default: false}
steps:
  - id: greet
    uses: com.example.tools/echo/echo@1
    with: {text: "hello ${{ inputs.who }}"}
  - id: each
    uses: com.example.tools/echo/echo@1
    foreach: ${{ inputs.names }}
    with: {text: "${{ item }}"}
  - id: shout
    uses: com.example.tools/echo/echo@1
    if: ${{ inputs.loud }}
    with: {text: "HELLO"}
  - id: flaky
    uses: com.example.tools/flaky/run@1
    continue-on-error: true
    with: {text: x}
outputs:
  greeting: ${{ steps.greet.output.text }}
  count: ${{ size(steps.each.output) }}
"""


@dataclass
class Api:
    url: str
    key: str


@pytest.fixture
def stand_in() -> Iterator[StandInApi]:
    api = StandInApi().start()
    yield api
    api.stop()


@pytest.fixture
def queue() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def api(tmp_path: Path, temporal_env: WorkflowEnvironment, queue: str) -> Iterator[Api]:
    settings = Settings(
        data_dir=tmp_path / "state",
        temporal_address=temporal_env.client.service_client.config.target_host,
        temporal_task_queue=queue,
    )
    app = create_app(settings)
    with Session(app.state.engine) as session:
        org = accounts.create_organization(session, name="cli test")
        _, secret = accounts.create_api_key(
            session, org_id=org.id, scopes=["routines:run", "routines:read", "actions:call"]
        )
        session.commit()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="none", lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the api did not start"
        time.sleep(0.01)
    yield Api(url=f"http://127.0.0.1:{sock.getsockname()[1]}", key=secret)
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
    app.state.engine.dispose()


@pytest.fixture
async def worker(temporal_env: WorkflowEnvironment, stand_in: StandInApi, queue: str) -> AsyncIterator[None]:
    acts = ActionActivities(ActivitySettings(api_url=stand_in.url, worker_token=SecretStr("wkr")))
    async with build_worker(temporal_env.client, queue, acts):
        yield
    await acts.aclose()


async def b3os(api: Api, cwd: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=api.url, B3OS_API_KEY=api.key)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_routine_run_prints_each_step_then_the_outputs(
    api: Api, worker: None, stand_in: StandInApi, tmp_path: Path
) -> None:
    stand_in.script(FLAKY, [problem(502, "tool_failed", "exit", "the command exited with 3", exit_code=3)])
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, out, err = await b3os(
        api,
        tmp_path,
        "routine",
        "run",
        "greet.yaml",
        "--input",
        "who=ann",
        "--input",
        'names=["x", "y", "z"]',
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("run run_") and lines[0].endswith(" of greet-all started")
    assert lines[1:5] == [
        '✓ greet (1 attempt): {"text": "hello ann"}',
        '✓ each (1 attempt): [{"text": "x"}, {"text": "y"}, {"text": "z"}]',
        "- shout: skipped",
        "✗ flaky failed (1 attempt): tool_failed (exit): the command exited with 3",
    ]
    assert lines[5] == "outputs:"
    assert json.loads("\n".join(lines[6:])) == {"greeting": "hello ann", "count": 3}


async def test_routine_run_json_prints_one_object(api: Api, worker: None, tmp_path: Path) -> None:
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, out, _ = await b3os(
        api, tmp_path, "routine", "run", "greet.yaml", "-i", 'who="42"', "-i", "loud=true", "--json"
    )
    assert code == 0
    body = json.loads(out)
    assert set(body) == {"run_id", "status", "outputs", "steps"}
    assert body["status"] == "succeeded"
    assert body["outputs"] == {"greeting": "hello 42", "count": 2}  # "42" is JSON text
    assert body["steps"]["shout"] == {"status": "succeeded", "attempts": 1, "output": {"text": "HELLO"}}
    assert body["steps"]["greet"] == {"status": "succeeded", "attempts": 1, "output": {"text": "hello 42"}}


async def test_routine_run_reports_a_failed_run_and_exits_1(
    api: Api, worker: None, stand_in: StandInApi, tmp_path: Path
) -> None:
    stand_in.script(
        "com.example.tools/echo/echo@1", [problem(422, "invalid_input", "schema", "text is too long")]
    )
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, out, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "--input", "who=ann")
    assert code == 1
    assert "✗ greet failed (1 attempt): invalid_input (schema): text is too long" in out
    assert err.strip().endswith("failed: step greet: invalid_input (schema): text is too long")
    assert "Traceback" not in err


async def test_routine_run_refuses_bad_files_and_inputs_with_a_sentence(api: Api, tmp_path: Path) -> None:
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, _, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "--input", "who")
    assert code == 2 and err.strip() == "b3os routine run: --input 'who' is not NAME=VALUE"
    code, _, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "--input", "nobody=1")
    assert code == 1
    assert "routine 'greet-all' has no input 'nobody'" in err and "Traceback" not in err
    (tmp_path / "bad.yaml").write_text(
        ROUTINE.replace("foreach: ${{ inputs.names }}", "foreach: ${{ inputs. }}")
    )
    code, _, err = await b3os(api, tmp_path, "routine", "run", "bad.yaml")
    assert code == 1 and err.startswith("bad.yaml:12:25: step 'each': foreach:") and "Traceback" not in err


def test_input_values_parse_as_json_else_text() -> None:
    from cli.routine_run import parse_inputs

    assert parse_inputs(["n=42", "b=true", "l=[1,2]", 'o={"a": 1}', "t=hello world", "e=", 'q="1"']) == {
        "n": 42,
        "b": True,
        "l": [1, 2],
        "o": {"a": 1},
        "t": "hello world",
        "e": "",
        "q": "1",
    }
