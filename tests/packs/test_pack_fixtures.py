"""A pack's fixtures (fixtures/*.json: input -> output or error) and publish check 41: each fixture fits its
action, and a build or a verify refuses one that does not, naming the fixture file and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packfixtures import ECHO_DIR, KID, REPO

from packs.build import build_pack
from packs.errors import ChecksFailed
from packs.fixtures import (
    MAX_FIXTURE_BYTES,
    MAX_FIXTURES_BYTES,
    PackFixtures,
    fixture_problems,
    size_problems,
)
from packs.loader import load_pack
from packs.verify import verify_pack_dir

PACKS = [ECHO_DIR, *sorted(p for p in (REPO / "examples" / "packs").iterdir() if p.is_dir())]


@pytest.mark.parametrize("root", PACKS, ids=lambda p: p.name)
def test_the_example_packs_fixtures_fit_their_actions(root: Path) -> None:
    pack = load_pack(root)
    assert fixture_problems(pack.manifest, pack.other_files()) == []


def _problems(fixture: Any, name: str = "x.json") -> list[str]:
    pack = load_pack(ECHO_DIR)
    data = fixture if isinstance(fixture, bytes) else json.dumps(fixture).encode()
    files = {**pack.other_files(), f"fixtures/{name}": data}
    return [v.message for v in fixture_problems(pack.manifest, files)]


ACTIONS = "use the key of one of the pack's actions: echo, fail, noop"


@pytest.mark.parametrize(
    ("fixture", "messages"),
    [
        (b"{", ["check 41: fixtures/x.json is not accepted: it is not JSON: Expecting property name enclosed "
                "in double quotes at line 1, column 2"]),
        ([1], ['check 41: fixtures/x.json is not accepted: a fixture is a JSON object {"action", "input", '
               '"output" or "error"}']),
        ({"input": {}, "output": {}},
         [f"check 41: fixtures/x.json:action is missing: {ACTIONS}"]),
        ({"action": "shout", "input": {}, "output": {}},
         [f'check 41: fixtures/x.json:action "shout" is not accepted: {ACTIONS}']),
        ({"action": "noop", "output": {}},
         ["check 41: fixtures/x.json:input is missing: use the call's input, a JSON object"]),
        ({"action": "noop", "input": {}},
         ['check 41: fixtures/x.json:output is missing: give what the call answers: "output", or "error"']),
        ({"action": "noop", "input": {}, "output": {}, "error": {"code": "tool_failed"}},
         ['check 41: fixtures/x.json:error {"code": "tool_failed"} is not accepted: give exactly one of '
          '"output" and "error", not both']),
        ({"action": "noop", "input": {}, "output": {}, "when": "now"},
         ['check 41: fixtures/x.json:when "now" is not accepted: a fixture has only the fields action, '
          "title, input, output, error"]),
        ({"action": "echo", "input": {"text": 7}, "output": {"text": "7"}},
         ['check 41: fixtures/x.json:input.text 7 is not accepted: the inputSchema of action "echo" refuses '
          "it: 7 is not of type 'string'"]),
        ({"action": "echo", "input": {"text": "hi"}, "output": {"text": ["hi"]}},
         ['check 41: fixtures/x.json:output.text ["hi"] is not accepted: the outputSchema of action "echo" '
          "refuses it: ['hi'] is not of type 'string'"]),
        ({"action": "fail", "input": {"mode": "exit"}, "error": {"code": "boom", "retryable": "yes"}},
         ['check 41: fixtures/x.json:error.code "boom" is not accepted: use one of invalid_request, '
          "unauthorized, forbidden, not_found, rate_limited, concurrency_limited, quota_exceeded, "
          "tool_failed, action_failed, output_invalid, tool_unavailable, pack_unavailable, "
          "action_unavailable, tool_timed_out, action_timed_out",
          'check 41: fixtures/x.json:error.retryable "yes" is not accepted: use true or false']),
        ({"action": "fail", "input": {"mode": "exit"}, "error": {"code": "tool_failed", "exitcode": 3}},
         ["check 41: fixtures/x.json:error.exitcode 3 is not accepted: an error has only the fields code, "
          "reason, message, retryable, retry_after, tool_code, tool_message, exit_code, signal, errors, "
          "pack_error, field, connection, upstream_status"]),
    ],
)  # fmt: skip
def test_a_fixture_that_does_not_fit_is_refused_naming_its_file_and_field(
    fixture: Any, messages: list[str]
) -> None:
    assert _problems(fixture) == messages


def test_a_fixture_over_its_size_is_refused_before_it_is_read() -> None:
    big = b" " * MAX_FIXTURE_BYTES + b"{}"
    assert _problems(big) == [
        f"check 41: fixtures/x.json is not accepted: it has {len(big)} bytes: a fixture has at most "
        f"{MAX_FIXTURE_BYTES}"
    ]


def test_the_fixtures_of_a_pack_hold_at_most_16_mib_in_all() -> None:
    sizes = {f"fixtures/{i}.json": MAX_FIXTURE_BYTES for i in range(9)}
    assert [(v.field, v.message) for v in size_problems(sizes)] == [
        (
            "fixtures/",
            f"check 41: fixtures/ holds {9 * MAX_FIXTURE_BYTES} bytes of fixtures: a pack's fixtures hold at "
            f"most {MAX_FIXTURES_BYTES} in all",
        )
    ]
    assert size_problems({**sizes, "fixtures/0.json": 0}) == []  # 16 MiB exactly


def test_files_under_fixtures_other_than_json_are_not_fixtures() -> None:
    assert _problems(b"# notes on the fixtures\n", "README.md") == []


def test_a_build_refuses_a_fixture_its_action_refuses_and_verify_reports_it(
    echo_copy: Path, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    bad = {"action": "echo", "input": {"text": "hi"}, "output": {"txt": "hi"}}
    (echo_copy / "fixtures" / "echo-typo.json").write_text(json.dumps(bad))
    with pytest.raises(ChecksFailed) as refused:
        build_pack(echo_copy, kid=KID, private_key=key, out_dir=tmp_path / "out")
    assert [(v.check, v.field, v.message) for v in refused.value.violations] == [
        (
            41,
            "fixtures/echo-typo.json:output",
            'check 41: fixtures/echo-typo.json:output {"txt": "hi"} is not accepted: the outputSchema of '
            "action \"echo\" refuses it: 'text' is a required property",
        ),
        (
            41,
            "fixtures/echo-typo.json:output",
            'check 41: fixtures/echo-typo.json:output {"txt": "hi"} is not accepted: the outputSchema of '
            "action \"echo\" refuses it: Additional properties are not allowed ('txt' was unexpected)",
        ),
    ]
    assert not (tmp_path / "out").exists()
    (echo_copy / "fixtures" / "echo-typo.json").unlink()
    build_pack(echo_copy, kid=KID, private_key=key, out_dir=tmp_path / "out")
    (tmp_path / "out" / "fixtures" / "noop.json").write_text(
        '{"action": "noop", "input": {"a": 1}, "output": {}}'
    )
    problems = verify_pack_dir(tmp_path / "out").problems
    assert (
        'check 41: fixtures/noop.json:input {"a": 1} is not accepted: the inputSchema of action "noop" '
        "refuses it: Additional properties are not allowed ('a' was unexpected)"
    ) in problems


def test_a_call_gets_the_fixture_of_its_action_whose_input_is_its_own() -> None:
    pack = load_pack(ECHO_DIR)
    fixtures = PackFixtures.of_files(pack.other_files())
    found = fixtures.answer("echo", {"text": "hi"})
    assert found is not None and (found.path, found.output) == ("fixtures/echo-text.json", {"text": "hi"})
    assert fixtures.answer("echo", {"text": "hi", "extra": 1}) is None
    assert fixtures.answer("noop", {"text": "hi"}) is None
    failing = fixtures.of_action("fail")[0]
    assert (failing.error or {})["code"] == "tool_failed" and failing.status == 502
