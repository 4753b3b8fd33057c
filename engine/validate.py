"""Load and validate a routine YAML file, reporting every problem at once with its line and column.

`load_routine(text, filename)` gives a `Routine` or raises `RoutineError`, whose `problems` each read
`file:line:column: message`. Checked: YAML syntax, unknown, missing and mistyped fields (from the
pydantic models), duplicate step ids, `uses:` refs, durations, `needs:` (known steps, once each, no
cycle), `${{ }}` syntax and scope (a step reads only the steps it needs, directly or through others
(without `needs:`, the steps before it), declared inputs, and `item`/`index` inside its foreach;
status functions only in `if:`), inputs' JSON
Schemas and defaults, and, given an `ActionResolver`, that each `uses:` resolves and that literal
`with:` values fit the action's inputSchema.

Errors::

    RoutineError         a routine file has problems (`problems`: list of Problem)

A run's inputs are checked against the routine's by engine.run_inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, get_args

import jsonschema
import yaml
from pydantic import ValidationError

from engine import expressions as ex
from engine.durations import duration_ms
from engine.errors import EngineError
from engine.model_problems import model_problems, short, where
from engine.routine import (
    MIN_TIMEOUT_MS,
    EventTrigger,
    InputType,
    Routine,
)
from engine.routine_checks import check_expressions, check_with
from engine.routine_events import check_triggers
from engine.routine_needs import check_needs
from engine.routine_sizes import check_sizes
from engine.run_inputs import RoutineInputError, resolve_inputs
from engine.yaml_positions import Located, YamlRefused, compose
from packs.schemas import schema_errors, schema_problem

if TYPE_CHECKING:
    from engine.resolvers import ActionResolver


class Problem(NamedTuple):
    """One problem of a routine file, at a 1-based line and column."""

    line: int
    column: int
    message: str


class FileProblems(EngineError):
    """A file has problems; `str()` lists each as `file:line:column: message`."""

    def __init__(self, filename: str, problems: list[Problem]) -> None:
        self.filename = filename
        self.problems = sorted(set(problems))
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """Each problem as `file:line:column: message`."""
        return [f"{self.filename}:{p.line}:{p.column}: {p.message}" for p in self.problems]


class RoutineError(FileProblems):
    """A routine file has problems; `str()` lists each as `file:line:column: message`."""


def load_routine_file(path: str | Path, resolver: ActionResolver | None = None) -> Routine:
    """Read and validate a routine file.

    Raises:
        RoutineError: the file cannot be read or has problems.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RoutineError(str(path), [Problem(1, 1, f"cannot read the file: {exc}")]) from None
    return load_routine(text, str(path), resolver)


def load_routine(text: str, filename: str = "<routine>", resolver: ActionResolver | None = None) -> Routine:
    """Parse and validate a routine.

    Args:
        text: the YAML text.
        filename: the name problems are reported under.
        resolver: when given, each `uses:` is resolved and literal `with:` values are checked
            against the action's inputSchema.

    Returns:
        The validated routine.

    Raises:
        RoutineError: with every problem found, each with its line and column.
    """
    try:
        doc = compose(text)
    except YamlRefused as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RoutineError(filename, [Problem(line, column, str(exc.problem))]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = " ".join(part for part in (exc.context, exc.problem) if part)
        raise RoutineError(filename, [Problem(line, column, f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise RoutineError(filename, [Problem(1, 1, f"YAML error: {exc}")]) from None
    problems: list[Problem] = [Problem(line, col, msg) for line, col, msg in doc.problems]
    data = doc.value
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        problems.append(Problem(*doc.position(()), f"a routine is a mapping with name and steps, got {got}"))
        raise RoutineError(filename, problems)
    routine: Routine | None = None
    try:
        # YAML spells fields as in the file (`with`, `max-attempts`), never by Python name (`with_`)
        routine = Routine.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems.extend(Problem(*p) for p in model_problems(exc, doc))
    problems.extend(Problem(*p) for p in _structure_problems(data, doc))
    problems.extend(Problem(*p) for p in check_needs(data, doc))
    problems.extend(Problem(*p) for p in check_expressions(data, doc))
    problems.extend(Problem(*p) for p in check_sizes(data, doc))
    problems.extend(Problem(*p) for p in _input_problems(data, doc))
    if routine is not None:
        problems.extend(Problem(*p) for p in _schedule_problems(routine, doc))
    if resolver is not None:
        problems.extend(Problem(*p) for p in check_with(data, doc, resolver))
        problems.extend(Problem(*p) for p in check_triggers(data, doc, resolver))
    if problems or routine is None:
        raise RoutineError(filename, problems)
    return routine


def _ms(duration: str) -> int:
    """A duration's milliseconds, or 0 when it is not one (the models say so)."""
    try:
        return duration_ms(duration)
    except ValueError:
        return 0


def _structure_problems(data: dict[str, Any], doc: Located) -> list[tuple[int, int, str]]:
    from packs.errors import RefError
    from packs.refs import ActionRef

    problems: list[tuple[int, int, str]] = []
    steps = data.get("steps")
    if not isinstance(steps, list):
        return problems
    first: dict[str, int] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            problems.append(
                (*doc.position(("steps", i)), f"step {i + 1}: a step is a mapping with id and uses")
            )
            continue
        sid = step.get("id")
        if isinstance(sid, str):
            if sid in first:
                line = doc.position(("steps", first[sid], "id"))[0]
                problems.append(
                    (*doc.position(("steps", i, "id")), f"duplicate step id '{sid}' (first at line {line})")
                )
            else:
                first[sid] = i
        timeout = step.get("timeout")
        if isinstance(timeout, str) and 0 < _ms(timeout) < MIN_TIMEOUT_MS:
            problems.append(
                (
                    *doc.position(("steps", i, "timeout")),
                    f"{where(('steps', i, 'timeout'), doc)}timeout {timeout} is shorter than a call can "
                    f"take ({MIN_TIMEOUT_MS // 1000}s at least; leave it out for the action's limit)",
                )
            )
        uses = step.get("uses")
        if isinstance(uses, str):
            try:
                ActionRef.parse(uses)
            except RefError as exc:
                problems.append(
                    (*doc.position(("steps", i, "uses")), f"{where(('steps', i), doc)}uses: {exc}")
                )
        elif "uses" in step:
            problems.append(
                (
                    *doc.position(("steps", i, "uses")),
                    f"{where(('steps', i), doc)}uses: must be an action ref such as "
                    f"com.example.tools/echo/echo@1, got {short(uses)}",
                )
            )
    return problems


def _input_problems(data: dict[str, Any], doc: Located) -> list[tuple[int, int, str]]:
    problems: list[tuple[int, int, str]] = []
    inputs = data.get("inputs")
    if not isinstance(inputs, dict):
        return problems
    for name, spec in inputs.items():
        if not isinstance(spec, dict):
            continue
        schema = {k: v for k, v in spec.items() if k != "default"}
        if "type" in schema and schema["type"] not in get_args(InputType):
            continue  # the models report the type, with the types allowed
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            path = ("inputs", name, *exc.absolute_path)
            problems.append(
                (*doc.position(doc.known_prefix(path)), f"inputs.{name}: not a JSON Schema: {exc.message}")
            )
            continue
        refused = schema_problem(schema)
        if refused is not None:
            where, why = refused
            at = doc.position(doc.known_prefix(("inputs", name, *where)))
            problems.append((*at, f"inputs.{name}: {why}"))
            continue
        if "default" in spec and ex.has_expressions(spec["default"]):
            problems.append(
                (
                    *doc.position(("inputs", name, "default")),
                    f"inputs.{name}.default: a default is a literal value: ${{{{ }}}} is not evaluated there",
                )
            )
        elif "default" in spec:
            for error in schema_errors(schema, spec["default"]):
                path = doc.known_prefix(("inputs", name, "default", *error.absolute_path))
                problems.append((*doc.position(path), f"inputs.{name}.default: {error.message}"))
    return problems


def _schedule_problems(routine: Routine, doc: Located) -> list[tuple[int, int, str]]:
    """Each `on: schedule:` item: a 5-field cron, a known timezone, inputs that fit the routine's."""
    from engine.cron import ScheduleError, check_cron, check_timezone

    problems: list[tuple[int, int, str]] = []
    listed = isinstance(routine.on, list)
    for i, schedule in enumerate(routine.schedules):
        at = ("on", _index_in_on(routine, schedule)) if listed else ("on", "schedule", i)
        for name, check, value in (
            ("cron", check_cron, schedule.cron),
            ("timezone", check_timezone, schedule.timezone),
        ):
            try:
                check(value)
            except ScheduleError as exc:
                problems.append((*doc.position(doc.known_prefix((*at, name))), f"on.schedule[{i}].{exc}"))
        try:
            resolve_inputs(routine, schedule.inputs)
        except RoutineInputError as exc:
            for problem in exc.problems:
                where = doc.position(doc.known_prefix((*at, "inputs")))
                problems.append((*where, f"on.schedule[{i}].inputs: {problem}"))
    on = routine.on if isinstance(routine.on, list) else []
    for i, item in enumerate(on):
        if isinstance(item, EventTrigger):
            try:
                resolve_inputs(routine, item.inputs)
            except RoutineInputError as exc:
                where = doc.position(doc.known_prefix(("on", i, "inputs")))
                problems.extend((*where, f"on[{i}].inputs: {problem}") for problem in exc.problems)
    return problems


def _index_in_on(routine: Routine, item: Any) -> int:
    """The index of an item of a listed `on:`."""
    return next(i for i, x in enumerate(routine.on or []) if x is item)  # type: ignore[arg-type]
