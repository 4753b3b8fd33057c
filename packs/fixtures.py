"""A pack's fixtures: example calls of its actions, each an input and the output or the error it gets.

Every `.json` file under a pack's `fixtures/` is one fixture (other files there are bundle files that no
fixture reads)::

    {"action": "echo", "title": "echoes its text", "input": {"text": "hi"}, "output": {"text": "hi"}}
    {"action": "fail", "input": {"mode": "tool_error", ...},
     "error": {"code": "tool_failed", "reason": "tool_error", "tool_code": "asked", "retryable": true}}

`action` is the key of one of the pack's actions, `input` the call's input as sent, and exactly one of
`output` (what the action answers) or `error` (the api's error answer: `code` is one of `ERROR_STATUS`,
with `reason`, `message`, `retryable`, `retry_after` for a 429 or 503, and the detail fields of
docs/calls.md). `title` is optional text.

`fixture_problems` is publish check 41: each fixture parses and fits its action (input against the
inputSchema, output against the outputSchema), named by its file and field. `PackFixtures` finds the
fixture of a call (same action, same input): `b3os routine test` answers steps with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from packs.checks_util import Report, actions_of, missing_or, path_of, same
from packs.errors import Violation
from packs.schemas import schema_errors

CHECK = 41
RULE = (
    'each .json file under fixtures/ is {"action", "title"?, "input", "output" or "error"}: an '
    "action of the pack, an input its inputSchema accepts, an output its outputSchema accepts or an error "
    "of a known code"
)
PREFIX = "fixtures/"
MAX_FIXTURE_BYTES = 2 << 20
"""The largest fixture file: a call's input is at most 1 MiB, a step's output 1.5 MiB."""
MAX_FIXTURES_BYTES = 16 << 20
"""The fixtures of a pack in all: what check 41 reads (at publish, in the api)."""

ERROR_STATUS: dict[str, int] = {
    "invalid_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "rate_limited": 429,
    "concurrency_limited": 429,
    "quota_exceeded": 429,
    "tool_failed": 502,
    "action_failed": 502,
    "output_invalid": 502,
    "tool_unavailable": 503,
    "pack_unavailable": 503,
    "action_unavailable": 503,
    "tool_timed_out": 504,
    "action_timed_out": 504,
}
"""The error codes a fixture may answer, and the HTTP status the api answers each with (docs/calls.md)."""

ERROR_FIELDS = (
    "code",
    "reason",
    "message",
    "retryable",
    "retry_after",
    "tool_code",
    "tool_message",
    "exit_code",
    "signal",
    "errors",
    "pack_error",
    "field",
    "connection",
    "upstream_status",
)
FIXTURE_FIELDS = ("action", "title", "input", "output", "error")
MAX_ERRORS_PER_FIXTURE = 3


@dataclass(frozen=True)
class Fixture:
    """One fixture: the file it came from, its action's key, its input, and its output or error."""

    path: str
    action: str
    input: dict[str, Any]
    output: Any = None
    error: dict[str, Any] | None = None
    title: str | None = None

    @property
    def status(self) -> int | None:
        """The api's HTTP status for the error (None for an output)."""
        return None if self.error is None else ERROR_STATUS[self.error["code"]]


def fixture_paths(files: Mapping[str, Any]) -> list[str]:
    """The fixtures among bundle paths: the `.json` files under fixtures/, sorted."""
    return sorted(p for p in files if p.startswith(PREFIX) and p.endswith(".json"))


def fixture_problems(manifest: Mapping[str, Any], files: Mapping[str, bytes]) -> list[Violation]:
    """Check 41 over every fixture of a pack: each violation names the fixture file and its field.

    Args:
        manifest: the manifest (its actions passed checks 8 to 10).
        files: the bundle files by path (the fixtures are the .json files under fixtures/).
    """
    paths = fixture_paths(files)
    refused = size_problems({p: len(files[p]) for p in paths})
    if refused:
        return refused
    report = Report()
    actions = {a.get("key"): a for _, a in actions_of(manifest)}
    for path in paths:
        _check_one(report, path, files[path], actions)
    return report.violations(Violation)


def size_problems(sizes: Mapping[str, int]) -> list[Violation]:
    """Check 41 by the fixtures' sizes alone (path -> bytes), before any is read: each at most
    `MAX_FIXTURE_BYTES`, all together at most `MAX_FIXTURES_BYTES`."""
    report = Report()
    for path, size in sorted(sizes.items()):
        if size > MAX_FIXTURE_BYTES:
            report.add(
                CHECK,
                path,
                None,
                f"it has {size} bytes: a fixture has at most {MAX_FIXTURE_BYTES}",
                name_only=True,
            )
    total = sum(sizes.values())
    if total > MAX_FIXTURES_BYTES:
        limit = MAX_FIXTURES_BYTES
        text = f"fixtures/ holds {total} bytes of fixtures: a pack's fixtures hold at most {limit} in all"
        report.add(CHECK, "fixtures/", None, "", sentence=text)
    return report.violations(Violation)


def _check_one(report: Report, path: str, data: bytes, actions: Mapping[Any, Mapping[str, Any]]) -> None:
    def add(field: str, value: Any, accepted: str) -> None:
        report.add(CHECK, f"{path}:{field}" if field else path, value, accepted, name_only=not field)

    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        add("", None, f"it is not UTF-8 text (byte {exc.start})")
        return
    except json.JSONDecodeError as exc:
        add("", None, f"it is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}")
        return
    if not isinstance(raw, dict):
        add("", None, 'a fixture is a JSON object {"action", "input", "output" or "error"}')
        return
    for key in raw:
        if key not in FIXTURE_FIELDS:
            add(key, raw[key], f"a fixture has only the fields {', '.join(FIXTURE_FIELDS)}")
    key = raw.get("action")
    action = actions.get(key) if isinstance(key, str) else None
    if action is None:
        keys = ", ".join(sorted(str(k) for k in actions if isinstance(k, str))) or "none"
        add("action", key, missing_or("action" in raw, f"use the key of one of the pack's actions: {keys}"))
    if "title" in raw and not (isinstance(raw["title"], str) and 0 < len(raw["title"]) <= 200):
        add("title", raw["title"], "use a text of 1 to 200 characters")
    if not isinstance(raw.get("input"), dict):
        add("input", raw.get("input"), missing_or("input" in raw, "use the call's input, a JSON object"))
    elif action is not None:
        for where, value, why in _misfits(action.get("inputSchema"), raw["input"], "inputSchema", key):
            add(f"input{where}", value, why)
    if "output" not in raw and "error" not in raw:
        add("output", None, missing_or(False, 'give what the call answers: "output", or "error"'))
    elif "output" in raw and "error" in raw:
        add("error", raw["error"], 'give exactly one of "output" and "error", not both')
    elif "output" in raw and action is not None:
        for where, value, why in _misfits(action.get("outputSchema"), raw["output"], "outputSchema", key):
            add(f"output{where}", value, why)
    elif "error" in raw:
        for field, value, why in error_problems(raw["error"]):
            add(field, value, why)


def _misfits(schema: Any, value: Any, which: str, key: Any) -> Iterator[tuple[str, Any, str]]:
    if not isinstance(schema, dict):
        return
    for err in schema_errors(schema, value)[:MAX_ERRORS_PER_FIXTURE]:
        yield (
            path_of(err.absolute_path),
            err.instance,
            f'the {which} of action "{key}" refuses it: {err.message}',
        )


def error_problems(error: Any) -> list[tuple[str, Any, str]]:
    """Why a fixture's (or a routine test's) `error` is not an error answer: (field, value, sentence)."""
    if not isinstance(error, dict):
        return [("error", error, 'use {"code": ..., "message": ...}, an error answer of the api')]
    out: list[tuple[str, Any, str]] = []
    code = error.get("code")
    if code not in ERROR_STATUS:
        codes = ", ".join(ERROR_STATUS)
        out.append(("error.code", code, missing_or("code" in error, f"use one of {codes}")))
    for name in ("reason", "message", "tool_code", "tool_message", "signal"):
        if name in error and not isinstance(error[name], str):
            out.append((f"error.{name}", error[name], "use a text"))
    if "retryable" in error and not isinstance(error["retryable"], bool):
        out.append(("error.retryable", error["retryable"], "use true or false"))
    after = error.get("retry_after")
    if "retry_after" in error and not (
        isinstance(after, (int, float)) and not isinstance(after, bool) and 0 <= after <= 3600
    ):
        out.append(("error.retry_after", after, "use the seconds to wait, 0 to 3600"))
    for name in error:
        if name not in ERROR_FIELDS:
            out.append(
                (f"error.{name}", error[name], f"an error has only the fields {', '.join(ERROR_FIELDS)}")
            )
    return out


def parse_fixture(path: str, data: bytes) -> Fixture:
    """One fixture file as a `Fixture` (the file passed check 41).

    Raises:
        ValueError: it does not parse or lacks its fields (a sentence naming the file).
    """
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("action"), str)
        or not isinstance(raw.get("input"), dict)
    ):
        raise ValueError(f'{path} is not a fixture: it needs "action" and an "input" object')
    error = raw.get("error")
    return Fixture(
        path=path,
        action=raw["action"],
        input=raw["input"],
        output=raw.get("output"),
        error=dict(error) if isinstance(error, dict) else None,
        title=raw.get("title") if isinstance(raw.get("title"), str) else None,
    )


class PackFixtures:
    """The fixtures of one pack version, by action: the first fixture (in path order) whose input is the
    call's answers it."""

    def __init__(self, fixtures: list[Fixture]) -> None:
        self._by_action: dict[str, list[Fixture]] = {}
        for fixture in sorted(fixtures, key=lambda f: f.path):
            self._by_action.setdefault(fixture.action, []).append(fixture)

    @classmethod
    def of_files(cls, files: Mapping[str, bytes]) -> PackFixtures:
        """The fixtures among a pack's bundle files.

        Raises:
            ValueError: a fixture does not parse.
        """
        return cls([parse_fixture(p, files[p]) for p in fixture_paths(files)])

    def of_action(self, action: str) -> list[Fixture]:
        """Every fixture of an action, in path order."""
        return list(self._by_action.get(action, []))

    def answer(self, action: str, input: Any) -> Fixture | None:
        """The fixture of a call of `action` with `input` (JSON equality), or None."""
        return next((f for f in self._by_action.get(action, []) if same(f.input, input)), None)
