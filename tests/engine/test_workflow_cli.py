"""`b3os routine run` as a user runs it: a real process against a real api process, Temporal, a routine
worker process and a node running the echo tool (the session's stack of tests/realstack.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import loopback
import pytest
from realstack import RoutineStack

ROUTINE = """\
name: greet-all
inputs:
  who: {type: string}
  names: {type: array, default: [a, b]}
  loud: {type: boolean, default: false}
steps:
  - id: greet
    uses: com.example.tools/free/echo@1
    with: {text: "hello ${{ inputs.who }}"}
  - id: each
    uses: com.example.tools/free/echo@1
    foreach: ${{ inputs.names }}
    with: {text: "${{ item }}"}
  - id: shout
    uses: com.example.tools/free/echo@1
    if: ${{ inputs.loud }}
    with: {text: "HELLO"}
  - id: flaky
    uses: com.example.tools/free/fail@1
    continue-on-error: true
    with: {mode: exit, exitCode: 3}
outputs:
  greeting: ${{ steps.greet.output.text }}
  count: ${{ size(steps.each.output) }}
"""


@dataclass
class Api:
    url: str
    key: str


@pytest.fixture
def api(routine_stack: RoutineStack) -> Api:
    return Api(url=routine_stack.url, key=routine_stack.runner().key)


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


async def test_routine_run_prints_each_step_then_the_outputs(api: Api, tmp_path: Path) -> None:
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
        "✗ flaky failed (1 attempt): tool_failed (exit): the tool exited with status 3",
    ]
    assert lines[5] == "outputs:"
    assert json.loads("\n".join(lines[6:])) == {"greeting": "hello ann", "count": 3}


async def test_routine_run_json_prints_one_object(api: Api, tmp_path: Path) -> None:
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, out, _ = await b3os(
        api, tmp_path, "routine", "run", "greet.yaml", "-i", 'who="42"', "-i", "loud=true", "--json"
    )
    assert code == 0
    body = json.loads(out)
    assert set(body) == {"run_id", "status", "outputs", "steps"}
    assert body["status"] == "succeeded"
    assert body["outputs"] == {"greeting": "hello 42", "count": 2}  # "42" is JSON text
    pin = "com.example.tools/free/echo@1.0.0"
    shout = {"status": "succeeded", "attempts": 1, "ref": pin, "output": {"text": "HELLO"}}
    assert body["steps"]["shout"] == shout
    assert body["steps"]["greet"] == {
        "status": "succeeded",
        "attempts": 1,
        "ref": pin,
        "output": {"text": "hello 42"},
    }


async def test_routine_run_reports_a_failed_run_and_exits_1(api: Api, tmp_path: Path) -> None:
    failing = ROUTINE.replace(
        'with: {text: "hello ${{ inputs.who }}"}', "with: {text: '${{ size(inputs.who) }}'}"
    )
    (tmp_path / "greet.yaml").write_text(failing)
    code, out, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "--input", "who=ann")
    assert code == 1, err
    sentence = "invalid_request: input.text: 3 is not of type 'string'"
    assert f"✗ greet failed (1 attempt): {sentence}" in out, err
    assert err.strip().endswith(f"failed: step greet: {sentence}")
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


HOSTILE_TEXT = "\x1b]0;owned\x07\x1b[2J\u009b31m\u202eevil\r"


async def test_routine_run_writes_no_control_characters_from_an_answer(api: Api, tmp_path: Path) -> None:
    """A step's output carrying escape sequences (OSC, CSI, C1, a bidi override, a carriage return)
    reaches the terminal as visible `\\uXXXX` text; `--json` still decodes to the very same output."""
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    who = json.dumps(HOSTILE_TEXT)
    code, out, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "--input", f"who={who}")
    assert code == 0, err
    shown = out + err
    assert not any(ch in shown for ch in "\x1b\x07\r\u009b\u202e")
    assert '✓ greet (1 attempt): {"text": "hello \\u001b]0;owned\\u0007' in out
    code, out, err = await b3os(
        api, tmp_path, "routine", "run", "greet.yaml", "--input", f"who={who}", "--json"
    )
    assert code == 0, err
    assert "\x1b" not in out and "\u009b" not in out
    assert json.loads(out)["outputs"]["greeting"] == f"hello {HOSTILE_TEXT}"


def test_the_cli_streams_escape_what_a_terminal_would_obey() -> None:
    from cli.terminal import clean

    assert clean("a\tb\nc") == "a\tb\nc"
    assert clean("\x1b[2J\x7f\u0085\u2066") == "\\u001b[2J\\u007f\\u0085\\u2066"
    assert json.loads(clean(json.dumps({"t": "\u009b\u202e"}, ensure_ascii=False))) == {"t": "\u009b\u202e"}


SLOW = (
    "name: slow\nsteps:\n  - id: nap\n    uses: com.example.tools/free/fail@1\n"
    f"    foreach: [{', '.join(str(i) for i in range(40))}]\n    with: {{mode: sleep, seconds: 2}}\n"
)
"""A run of ~20 s whose every call ends well within the action's own 5 s, so that the run is still going
when Ctrl-C reaches it however slow the machine (one call sleeping 20 s ends at 5 s)."""


async def test_ctrl_c_cancels_the_run_and_exits_130_as_the_help_says(api: Api, tmp_path: Path) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=api.url, B3OS_API_KEY=api.key, PYTHONFAULTHANDLER="1")
    # Ctrl-C as a terminal sends it. A suite started in the background by a shell without job control (`cmd &`
    # in a script, as CI may) ignores SIGINT, every child inherits that and Python then installs no
    # KeyboardInterrupt handler: the CLI is started with SIGINT's default action, as from a terminal
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "routine", "run", "slow.yaml", cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stdout is not None
    started = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
    assert started.startswith("run run_") and started.rstrip().endswith(" of slow started"), started
    run_id = started.split()[1]
    proc.send_signal(signal.SIGINT)
    exited = asyncio.ensure_future(proc.communicate())
    try:
        _, err = await asyncio.wait_for(asyncio.shield(exited), timeout=60)
    except TimeoutError:  # where it hangs: SIGABRT makes faulthandler print every thread's stack
        proc.send_signal(signal.SIGABRT)
        raise AssertionError(f"no exit 60 s after Ctrl-C:\n{(await exited)[1].decode()}") from None
    assert proc.returncode == 130, err
    assert err.decode().strip() == f"run {run_id} cancelled"
    headers = {"Authorization": f"Bearer {api.key}"}
    ended = loopback.get(f"{api.url}/v1/runs/{run_id}?wait_s=30", headers=headers, timeout=60).json()
    assert ended["status"] == "cancelled"
    code, out, _ = await b3os(api, tmp_path, "routine", "run", "--help")
    assert code == 0 and "130 when Ctrl-C cancelled it" in " ".join(out.split())


async def test_output_into_a_reader_that_went_away_ends_quietly(api: Api, tmp_path: Path) -> None:
    """`b3os run show RUN | head -1`: the reader closes the pipe; no traceback, the shell's SIGPIPE status."""
    (tmp_path / "greet.yaml").write_text(ROUTINE)
    code, out, err = await b3os(api, tmp_path, "routine", "run", "greet.yaml", "-i", "who=ann", "--json")
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("B3OS_")}
    env.update(B3OS_API_URL=api.url, B3OS_API_KEY=api.key)
    for args in (["run", "show", run_id], ["run", "show", run_id, "--json"], ["routine", "schema"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the command writes its first byte
        try:
            done = subprocess.run(
                [sys.executable, "-m", "cli", *args], cwd=tmp_path, env=env, stdout=write,
                stderr=subprocess.PIPE, text=True, timeout=60,
            )  # fmt: skip
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (141, ""), args


PROBLEMS = """\
name: Not_A_Name
steps:
  - id: a
    uses: com.example.tools/free/echo@1
    with: {text: 42, colour: red}
  - id: b
    uses: com.example.tools/free/shout@1
  - id: c
    uses: com.example.tools/free/echo@1
    timeout: soon
    with: {text: "${{ steps.nope.output }}"}
"""
UNRESOLVED = """\
name: unresolved
steps:
  - id: a
    uses: com.example.tools/free/echo@1
    with: {text: 42, colour: red}
  - id: b
    uses: com.example.tools/free/shout@1
"""


@pytest.mark.parametrize("source", [PROBLEMS, UNRESOLVED], ids=["with-local-problems", "unresolved-only"])
async def test_routine_run_reports_every_problem_routine_validate_reports(
    api: Api, tmp_path: Path, source: str
) -> None:
    (tmp_path / "bad.yaml").write_text(source)
    code, listed, _ = await b3os(api, tmp_path, "routine", "validate", "bad.yaml")
    assert code == 1
    problems = listed.splitlines()
    assert len(problems) >= 3 and all(line.startswith("bad.yaml:") for line in problems), listed
    assert any("shout" in line for line in problems)  # resolved in the registry, not only read
    code, _, err = await b3os(api, tmp_path, "routine", "run", "bad.yaml")
    assert code == 1 and err.splitlines() == problems


NAMED = """\
name: named-steps
steps:
  - id: greet
    name: Say hello
    uses: com.example.tools/free/echo@1
    with: {text: hi}
  - id: bare
    uses: com.example.tools/free/echo@1
    with: {text: there}
"""


async def test_a_steps_name_titles_its_line_in_routine_run_and_run_show(api: Api, tmp_path: Path) -> None:
    (tmp_path / "named.yaml").write_text(NAMED)
    code, out, err = await b3os(api, tmp_path, "routine", "run", "named.yaml")
    assert code == 0, err
    run_id = out.split()[1]
    steps = ['✓ Say hello (greet) (1 attempt): {"text": "hi"}', '✓ bare (1 attempt): {"text": "there"}']
    assert out.splitlines()[1:3] == steps
    code, out, err = await b3os(api, tmp_path, "run", "show", run_id)
    assert code == 0, err
    assert out.splitlines()[1:3] == steps
    code, out, err = await b3os(api, tmp_path, "run", "show", run_id, "--json")
    assert code == 0, err
    body = json.loads(out)["steps"]
    assert body["greet"]["name"] == "Say hello" and "name" not in body["bare"]
