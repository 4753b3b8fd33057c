"""A routine's test file, `<routine>.test.yaml` beside `<routine>.yaml`: answers for its steps' calls and
the cases to run, each with its inputs and what it expects.

    answers:                 # for every case (a case's own answers for a step replace these)
      greet: {output: {text: hello Ann}}
    cases:
      - name: greets Ann
        inputs: {name: Ann}
        event: {title: a bug}  # a routine with triggers: the event that starts the run ({} without)
        answers:
          friends:           # one answer, or a list: the first that matches a call answers it
            - {item: 0, output: {text: 1. hello ada}}
            - {input: {text: 2. hello bob}, output: {text: 2. hello bob}}
          flaky: {error: {code: tool_failed, reason: tool_error, retryable: true}}
        expect:
          status: succeeded  # the default; failed with `error:` a part of the run's sentence
          outputs: {greeting: hello Ann}
          steps: {long: {status: skipped}, flaky: {attempts: 2, error: {code: tool_failed}}}
          calls: {greet: [{text: hello Ann}]}   # each call's input, in item order; [] for none

`load_cases` reads it with the routine it tests and refuses, at the line and column, what does not
fit: unknown fields, a step, output or input the routine does not have, an answer's output the action's
outputSchema refuses, an error that is not an error answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.routine import Routine
from engine.run_inputs import RoutineInputError, resolve_inputs
from engine.validate import FileProblems, Problem
from engine.yaml_positions import Located, YamlRefused, compose
from packs.checks_util import render, same
from packs.fixtures import error_problems
from packs.schemas import schema_errors

TEST_SUFFIX = ".test.yaml"


class CasesError(FileProblems):
    """A test file has problems; `lines()` gives each as `file:line:column: message`."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # as a routine: `attempts: "2"` is refused


class Answer(_Strict):
    """What a step's call gets: an output or an error, for the calls it matches (all when it names none)."""

    input: dict[str, Any] | None = None
    item: int | None = Field(default=None, ge=0)
    attempt: int | None = Field(default=None, ge=1)
    output: Any = None
    error: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_outcome(self) -> Answer:
        if ("output" in self.model_fields_set) == ("error" in self.model_fields_set):
            raise ValueError('an answer gives exactly one of "output" and "error"')
        return self

    def matches(self, input: Any, index: int | None, attempt: int) -> bool:
        """Whether this answer answers a call with this input, foreach index and attempt."""
        return (
            (self.input is None or same(self.input, input))
            and (self.item is None or self.item == index)
            and (self.attempt is None or self.attempt == attempt)
        )


Answers = dict[str, Answer | list[Answer]]


class StepExpect(_Strict):
    """What a step should end with; only the fields given are compared."""

    status: Literal["succeeded", "failed", "skipped", "cancelled"] | None = None
    output: Any = None
    attempts: int | None = Field(default=None, ge=0)
    error: dict[str, Any] | None = None


class Expect(_Strict):
    """What a case's run should end with."""

    status: Literal["succeeded", "failed"] = "succeeded"
    error: str | None = None
    outputs: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, StepExpect] = Field(default_factory=dict)
    calls: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)


class Case(_Strict):
    """One test case: a run with these inputs and answers, held against `expect`."""

    name: str = Field(min_length=1, max_length=200)
    inputs: dict[str, Any] = Field(default_factory=dict)
    event: dict[str, Any] | None = None  # the event a trigger starts the run with (`event` in scope)
    answers: Answers = Field(default_factory=dict)
    expect: Expect = Field(default_factory=Expect)


class CasesFile(_Strict):
    """A routine's test file."""

    answers: Answers = Field(default_factory=dict)
    cases: list[Case] = Field(min_length=1)

    def answers_of(self, case: Case) -> dict[str, list[Answer]]:
        """The answers a case's calls get, by step: the case's own for a step, else the file's."""
        merged = {**self.answers, **case.answers}
        return {step: value if isinstance(value, list) else [value] for step, value in merged.items()}


class Loaded(BaseModel):
    """A test file read with its routine: the cases and each case's inputs with defaults filled in."""

    path: Path
    file: CasesFile
    inputs: list[dict[str, Any]]


def cases_path_of(routine_path: Path) -> Path:
    """`hello.yaml` -> `hello.test.yaml` (beside it)."""
    name = routine_path.name
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name.rsplit(".", 1)[0]
    return routine_path.with_name(stem + TEST_SUFFIX)


def routine_path_of(test_path: Path) -> Path:
    """`hello.test.yaml` -> `hello.yaml` (beside it)."""
    return test_path.with_name(test_path.name[: -len(TEST_SUFFIX)] + ".yaml")


def load_cases(path: Path, routine: Routine, output_schemas: dict[str, dict[str, Any] | None]) -> Loaded:
    """Read a test file and check it against the routine it tests.

    Args:
        path: the test file.
        routine: the routine, validated.
        output_schemas: each step's action's outputSchema, by step id (None when unknown).

    Raises:
        CasesError: every problem, at its line and column.
    """
    name = str(path)
    try:
        doc = compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CasesError(name, [Problem(1, 1, f"cannot read the file: {exc}")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = str(exc.problem) if isinstance(exc, YamlRefused) else f"YAML syntax error: {exc.problem}"
        raise CasesError(name, [Problem(*where, what)]) from None
    except yaml.YAMLError as exc:
        raise CasesError(name, [Problem(1, 1, f"YAML error: {exc}")]) from None
    if not isinstance(doc.value, dict):
        raise CasesError(name, [Problem(1, 1, "a test file is a mapping with cases (and answers)")])
    problems = [Problem(*p) for p in doc.problems]  # duplicate keys
    try:
        file = CasesFile.model_validate(doc.value)
    except ValidationError as exc:
        for err in exc.errors():
            loc = _located(err["loc"], doc.value)
            if loc is None:
                continue
            field = _dotted(loc) or "the file"
            where = doc.key_position(loc) if err["type"] == "extra_forbidden" else doc.position(loc)
            problems.append(Problem(*where, f"{field}: {_message(err)}"))
        raise CasesError(name, problems) from None
    problems.extend(_against_routine(file, routine, output_schemas, doc))
    inputs: list[dict[str, Any]] = []
    for i, case in enumerate(file.cases):
        if case.event is not None and not routine.event_triggers:
            where = doc.key_position(("cases", i, "event"))
            what = f"cases[{i}].event: routine {routine.name!r} has no trigger in on:"
            problems.append(Problem(*where, what))
        try:
            inputs.append(resolve_inputs(routine, case.inputs))
        except RoutineInputError as exc:
            for text in exc.problems:
                problems.append(Problem(*doc.position(("cases", i, "inputs")), f"cases[{i}].inputs: {text}"))
    if problems:
        raise CasesError(name, problems)
    return Loaded(path=path, file=file, inputs=inputs)


def _against_routine(
    file: CasesFile, routine: Routine, output_schemas: dict[str, dict[str, Any] | None], doc: Located
) -> list[Problem]:
    steps = [s.id for s in routine.steps]
    known = ", ".join(steps)
    problems: list[Problem] = []

    def add(path: tuple[Any, ...], text: str, *, key: bool = False) -> None:
        where = doc.key_position(path) if key else doc.position(path)
        problems.append(Problem(*where, f"{_dotted(path)}: {text}"))

    def check_answers(answers: Answers, at: tuple[Any, ...]) -> None:
        for step_id, value in answers.items():
            if step_id not in steps:
                add((*at, step_id), f"the routine has no step {step_id!r} (its steps: {known})", key=True)
                continue
            items = value if isinstance(value, list) else [value]
            for n, answer in enumerate(items):
                where = (*at, step_id, n) if isinstance(value, list) else (*at, step_id)
                if answer.error is not None:
                    for field, bad, why in error_problems(answer.error):
                        add((*where, *field.split(".")), f"{_short(bad)} is not accepted: {why}")
                    continue
                schema = output_schemas.get(step_id)
                if schema is None:
                    continue
                for err in schema_errors(schema, answer.output)[:3]:
                    at_value = (*where, "output", *err.absolute_path)
                    add(at_value, f"the action's outputSchema refuses {_short(err.instance)}: {err.message}")

    check_answers(file.answers, ("answers",))
    outputs = ", ".join(routine.outputs) or "none"
    for i, case in enumerate(file.cases):
        check_answers(case.answers, ("cases", i, "answers"))
        expect = ("cases", i, "expect")
        for step_id in [*case.expect.steps, *case.expect.calls]:
            if step_id not in steps:
                which = "steps" if step_id in case.expect.steps else "calls"
                add(
                    (*expect, which, step_id),
                    f"the routine has no step {step_id!r} (its steps: {known})",
                    key=True,
                )
        for out in case.expect.outputs:
            if out not in routine.outputs:
                add(
                    (*expect, "outputs", out),
                    f"the routine has no output {out!r} (its outputs: {outputs})",
                    key=True,
                )
    return problems


def _located(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...] | None:
    """A pydantic error location as a path in the document, its union tags left out; None for the error
    of a union's other branch (the list of answers, for one answer, and the other way round)."""
    path: list[Any] = []
    value = data
    for part in loc:
        if isinstance(value, dict) and part in value or isinstance(value, list) and isinstance(part, int):
            path.append(part)
            value = value[part] if isinstance(value, dict) or part < len(value) else None
        elif isinstance(part, str) and part.startswith("list[") != isinstance(value, list):
            return None  # the branch of the union that this value is not
    return tuple(path)


def _dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "is not a field here"
    if err["type"] == "missing":
        return "is missing"
    return str(err["msg"]).removeprefix("Value error, ")


def _short(value: Any) -> str:
    return render(value)
