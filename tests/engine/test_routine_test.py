"""`b3os routine test`: each example routine's tests pass offline on the real workflow (Temporal's
time-skipping test server, every call answered from fixtures), and a test that expects a wrong output,
or a step that no fixture answers, fails with a sentence, in the text and in the JUnit XML."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from cli.main import main
from engine.offline.cases import CasesError, cases_path_of, load_cases
from engine.offline.packs import LocalPacks, pack_directories
from engine.resolvers import LocalPackResolver
from engine.validate import load_routine_file

REPO = Path(__file__).resolve().parents[2]
ROUTINES = REPO / "examples" / "routines"
EXAMPLES = sorted(p for p in ROUTINES.glob("*.yaml") if not p.name.endswith(".test.yaml"))
ECHO = REPO / "examples" / "tools" / "echo"


def routine_test(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", "routine", "test", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_every_example_routine_has_its_offline_tests_beside_it() -> None:
    assert [p.name for p in EXAMPLES if not cases_path_of(p).is_file()] == []


def test_the_example_routines_pass_their_tests_offline_with_the_default_packs(tmp_path: Path) -> None:
    cases = sum(len(yaml.safe_load(cases_path_of(p).read_text())["cases"]) for p in EXAMPLES)
    junit = tmp_path / "junit.xml"
    # from the checkout, so that the default packs (examples/packs, examples/tools) are found
    names = [str(p.relative_to(REPO)) for p in EXAMPLES]
    done = routine_test(*names, "--junit", str(junit), cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[-1] == f"{cases} case(s): {cases} passed, 0 failed"
    assert "examples/routines/hello.test.yaml (hello.yaml)" in lines
    assert "  ✓ says where the best match is" in lines  # places.yaml, answered by open-meteo's fixtures/
    root = ElementTree.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == (str(cases), "0", "0")
    assert [s.get("name") for s in root.iter("testsuite")] == names
    assert len(list(root.iter("testcase"))) == cases


WRONG_GREETING = '        greeting: "hello Ann, again (2 friends next)"\n'

LONELY = """\
name: lonely
steps:
  - id: a
    uses: com.example.tools/echo/echo@1
    with: {text: hi}
  - id: b
    uses: com.example.tools/echo/echo@1
    with: {text: bye}
outputs:
  said: ${{ steps.a.output.text }}
"""

LONELY_TEST = """\
cases:
  - name: step a is answered by the echo pack's fixture, step b by nothing
    expect:
      steps:
        a: {status: succeeded, output: {text: hi}}
"""


def test_a_wrong_expected_output_and_a_step_without_fixture_fail_with_a_sentence(tmp_path: Path) -> None:
    shutil.copy(ROUTINES / "hello.yaml", tmp_path / "hello.yaml")
    tests = (ROUTINES / "hello.test.yaml").read_text()
    assert WRONG_GREETING in tests
    (tmp_path / "hello.test.yaml").write_text(tests.replace(WRONG_GREETING, "        greeting: hello Bob\n"))
    (tmp_path / "lonely.yaml").write_text(LONELY)
    (tmp_path / "lonely.test.yaml").write_text(LONELY_TEST)
    (tmp_path / "orphan.yaml").write_text(LONELY.replace("lonely", "orphan"))
    junit = tmp_path / "junit.xml"
    files = ["hello.yaml", "lonely.test.yaml", "orphan.yaml", "hello.test.yaml"]  # hello's tests run once
    done = routine_test(
        *files, "--packs", str(REPO / "examples" / "tools"), "--junit", str(junit), cwd=tmp_path
    )
    assert done.returncode == 1, done.stdout + done.stderr
    wrong = 'outputs.greeting is "hello Ann, again (2 friends next)", expected "hello Bob"'
    no_fixture = (
        'step b calls com.example.tools/echo/echo@1.0.0 (action echo) with input {"text": "bye"}, and no '
        f"fixture answers it: give answers.b in lonely.test.yaml, or add a fixture of action echo with this "
        f"input to {ECHO}/fixtures/"
    )
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "hello.test.yaml (hello.yaml)",
        "  ✗ greets Ann, passes the greeting and its file down the chain, then each friend",
        f"      {wrong}",
    ]
    assert "  ✗ step a is answered by the echo pack's fixture, step b by nothing" in lines
    assert f"      {no_fixture}" in lines
    assert "      the run ended failed, expected succeeded: step b failed: no_fixture: " + no_fixture in lines
    assert "  ✗ cannot run: orphan.test.yaml is missing: a routine's tests are in the file beside it" in lines
    assert lines[-1] == "2 case(s): 0 passed, 2 failed; 1 test file(s) could not run"
    root = ElementTree.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "1")
    failures = [f.get("message") for f in root.iter("failure")]
    assert failures == [wrong, no_fixture]
    assert [e.get("message") for e in root.iter("error")] == [
        "orphan.test.yaml is missing: a routine's tests are in the file beside it"
    ]


def _load(text: str) -> list[str]:
    resolver = LocalPackResolver([ECHO])
    routine = load_routine_file(ROUTINES / "hello.yaml", resolver)
    path = Path("hello.test.yaml")
    schemas = {
        s.id: LocalPacks([ECHO]).action(resolver.pins[s.uses])[1]["outputSchema"] for s in routine.steps
    }  # type: ignore[index]
    try:
        path.write_text(text)
        load_cases(path, routine, schemas)
    except CasesError as exc:
        return exc.lines()
    finally:
        path.unlink()
    return []


def test_a_test_file_is_checked_against_its_routine_at_each_line() -> None:
    text = """\
answers:
  greet: {output: {text: 3}}
  nope: {output: {}}
cases:
  - name: one
    inputs: {name: 7}
    answers:
      again: {error: {code: teapot}}
      last: {output: {text: a}, error: {code: tool_failed}}
      friends: [{item: -1, output: {text: a}}]
    expect:
      outputs: {colour: red}
      steps: {gone: {status: skipped}}
      colour: red
"""
    assert _load(text) == [
        'hello.test.yaml:9:13: cases[0].answers.last: an answer gives exactly one of "output" and "error"',
        "hello.test.yaml:10:24: cases[0].answers.friends[0].item: Input should be greater than or equal to 0",
        "hello.test.yaml:14:7: cases[0].expect.colour: is not a field here",
    ]
    text = """\
answers:
  greet: {output: {text: 3}}
  nope: {output: {}}
cases:
  - name: one
    inputs: {name: 7}
    answers:
      again: {error: {code: teapot}}
    expect:
      outputs: {colour: red}
      steps: {gone: {status: skipped}}
"""
    assert _load(text) == [
        "hello.test.yaml:2:26: answers.greet.output.text: the action's outputSchema refuses 3: "
        "3 is not of type 'string'",
        "hello.test.yaml:3:3: answers.nope: the routine has no step 'nope' "
        "(its steps: greet, again, last, friends, done)",
        "hello.test.yaml:6:13: cases[0].inputs: input 'name': 7 is not of type 'string'",
        'hello.test.yaml:8:29: cases[0].answers.again.error.code: "teapot" is not accepted: use one of '
        "invalid_request, unauthorized, forbidden, not_found, rate_limited, concurrency_limited, "
        "quota_exceeded, tool_failed, action_failed, output_invalid, tool_unavailable, pack_unavailable, "
        "action_unavailable, tool_timed_out, action_timed_out",
        "hello.test.yaml:10:17: cases[0].expect.outputs.colour: the routine has no output 'colour' "
        "(its outputs: greeting, file, friends)",
        "hello.test.yaml:11:15: cases[0].expect.steps.gone: the routine has no step 'gone' "
        "(its steps: greet, again, last, friends, done)",
    ]


def test_a_test_file_is_read_as_strictly_as_a_routine() -> None:
    text = """\
answers:
  greet: {output: {text: a}}
  greet: {output: {text: b}}
cases:
  - name: one
    expect:
      steps: {greet: {attempts: "2"}}
"""
    assert _load(text) == [
        "hello.test.yaml:3:3: duplicate key 'greet' (first at line 2)",
        "hello.test.yaml:7:33: cases[0].expect.steps.greet.attempts: Input should be a valid integer",
    ]


def test_a_pack_whose_fixtures_its_checks_refuse_is_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = tmp_path / "echo"
    shutil.copytree(ECHO, echo)
    (echo / "fixtures" / "echo-text.json").write_text(
        '{"action": "echo", "input": {"text": "hi"}, "output": {}}'
    )
    code = main(["routine", "test", str(ROUTINES / "hello.yaml"), "--packs", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"b3os routine test: {echo}: check 41: fixtures/echo-text.json:output {{}} is not accepted: the "
        "outputSchema of action \"echo\" refuses it: 'text' is a required property\n"
    )


def test_packs_names_a_directory_that_holds_no_pack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["routine", "test", str(ROUTINES / "hello.yaml"), "--packs", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"b3os routine test: --packs {tmp_path}: it is not a pack directory (no b3pack.json) "
        "nor a directory of them\n"
    )
    assert pack_directories([], cwd=REPO) == [
        REPO / "examples/packs/github",
        REPO / "examples/packs/open-meteo",
        REPO / "examples/tools/echo",
    ]


def test_routine_validate_checks_a_test_file_with_its_routine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = [str(p) for p in sorted(ROUTINES.glob("*.yaml"))]  # a shell's *.yaml: routines and tests
    packs = ["--packs", str(ECHO), "--packs", str(REPO / "examples" / "packs" / "open-meteo")]
    packs += ["--packs", str(REPO / "examples" / "packs" / "github")]
    assert main(["routine", "validate", *packs, *examples]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{name}: ok" for name in examples]
    shutil.copy(ROUTINES / "hello.yaml", tmp_path / "hello.yaml")
    (tmp_path / "hello.test.yaml").write_text(
        "cases:\n  - name: x\n    answers: {greet: {output: {txt: a}}}\n"
    )
    assert main(["routine", "validate", "--packs", str(ECHO), str(tmp_path / "hello.test.yaml")]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path}/hello.test.yaml:3:31: cases[0].answers.greet.output: the action's outputSchema refuses "
        '{"txt": "a"}: \'text\' is a required property',
        f"{tmp_path}/hello.test.yaml:3:31: cases[0].answers.greet.output: the action's outputSchema refuses "
        '{"txt": "a"}: Additional properties are not allowed (\'txt\' was unexpected)',
    ]


def test_a_case_gives_an_event_only_to_a_routine_with_a_trigger() -> None:
    text = "cases:\n  - name: one\n    event: {title: a bug}\n"
    assert _load(text) == [
        "hello.test.yaml:3:5: cases[0].event: routine 'hello' has no trigger in on:",
    ]
