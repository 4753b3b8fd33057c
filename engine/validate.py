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
from engine.errors import EngineError
from engine.routine import (
    MIN_TIMEOUT_MS,
    EventTrigger,
    InputType,
    RetryPolicy,
    Routine,
    ScheduleTrigger,
    Step,
    duration_ms,
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


_FIELDS: dict[str, list[str]] = {
    "routine": [f.alias or n for n, f in Routine.model_fields.items()],
    "step": [f.alias or n for n, f in Step.model_fields.items()],
    "retry": [f.alias or n for n, f in RetryPolicy.model_fields.items()],
    "trigger": [f.alias or n for n, f in EventTrigger.model_fields.items()],
    "schedule": [f.alias or n for n, f in ScheduleTrigger.model_fields.items()],
}


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
        problems.extend(_pydantic_problems(exc, doc))
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


def _on_errors(errors: list[Any], data: dict[str, Any]) -> list[Any]:
    """The errors of `on:` as the file wrote it: the errors of the form it did not use (a mapping or a
    list) left out, and the union's member names taken out of each place."""
    kept = []
    listed = isinstance(data.get("on"), list)
    for err in errors:
        loc = tuple(err["loc"])
        if loc[:1] == ("on",) and len(loc) > 1 and isinstance(loc[1], str):
            if loc[1].startswith("list[") != listed:
                continue
            loc = ("on", *loc[2:3], *loc[4:]) if listed else ("on", *loc[2:])
        kept.append({**err, "loc": loc})
    return kept


def _pydantic_problems(exc: ValidationError, doc: Located) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[Any, ...]] = set()
    data = doc.value if isinstance(doc.value, dict) else {}
    for err in _on_errors(exc.errors(), data):
        loc = tuple(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            parent, key = loc[:-1], str(loc[-1])
            owner = _owner(parent)
            allowed = ", ".join(_FIELDS.get(owner, []))
            problems.append(
                Problem(
                    *doc.key_position(loc),
                    f"{_where(parent, doc)}unknown field '{key}'"
                    + (f"; the fields of a {owner} are {allowed}" if allowed else ""),
                )
            )
            continue
        if kind == "missing":
            parent = loc[:-1]
            problems.append(Problem(*doc.position(parent), f"{_where(parent, doc)}missing field '{loc[-1]}'"))
            continue
        path = doc.known_prefix(loc)
        if path in seen:
            continue  # a union reports one error per member type: one problem is enough
        seen.add(path)
        if path[-1:] == ("uses",):
            continue  # reported with the ref's own sentence by _structure_problems
        at = doc.key_position(loc[:-1]) if loc[-1:] == ("[key]",) else doc.position(path)
        problems.append(Problem(*at, _message(path, err, doc, loc)))
    return problems


def _message(path: tuple[Any, ...], err: Any, doc: Located, loc: tuple[Any, ...]) -> str:
    field = str(path[-1]) if path else ""
    value = err.get("input")
    where = _where(path, doc)
    if loc[-1:] == ("[key]",):
        return (
            f"{where}input name {field!r} is not accepted: use letters, digits and _ "
            "(inputs.<name> must read it), such as my_input"
        )
    if field == "id" and err["type"] == "string_pattern_mismatch":
        return (
            f"{where}step id {value!r} is not accepted: use letters, digits and _, starting with a "
            "letter or _ (steps.<id> must read it), such as fetch_page"
        )
    if field == "name" and len(path) == 1 and err["type"] == "string_pattern_mismatch":
        return (
            f"routine name {value!r} is not accepted: "
            "use lowercase letters, digits and hyphens, such as hello-world"
        )
    if field in ("timeout", "backoff", "max-backoff") and err["type"] == "string_pattern_mismatch":
        return (
            f"{where}{value!r} is not a duration: use a whole number and a unit, such as 500ms, 30s, 2m or 1h"
        )
    if field == "trigger" and err["type"] == "string_pattern_mismatch":
        return (
            f"{where}{value!r} is not a trigger ref: use ns/pack/trigger@1 or @1.0.0, such as "
            "io.b3os/github/issue-opened@1"
        )
    if field == "foreach":
        return f"{where}must be an expression such as ${{{{ inputs.names }}}} or a list, got {value!r}"
    if field == "if":
        return f"{where}must be an expression such as steps.a.status == 'succeeded', got {value!r}"
    if err["type"] == "value_error":  # our own validators' sentences name the value already
        return f"{where}{str(err['msg']).removeprefix('Value error, ')}"
    return f"{where}{err['msg'][0].lower()}{err['msg'][1:]}, got {_short(value)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _owner(path: tuple[Any, ...]) -> str:
    if path == ():
        return "routine"
    if len(path) == 2 and path[0] == "steps":
        return "step"
    if len(path) == 3 and path[0] == "steps" and path[2] == "retry":
        return "retry"
    if len(path) == 2 and path[0] == "on" and isinstance(path[1], int):
        return "trigger"
    if len(path) == 3 and path[:2] == ("on", "schedule"):
        return "schedule"
    return ""


def _where(path: tuple[Any, ...], doc: Located) -> str:
    """A readable place: `step 'fetch': retry.max-attempts: ` or `inputs.name: `."""
    if not path:
        return ""
    if path[0] == "steps" and len(path) >= 2 and isinstance(path[1], int):
        step = doc.get(path[:2])
        sid = step.get("id") if isinstance(step, dict) else None
        head = f"step '{sid}'" if isinstance(sid, str) else f"step {path[1] + 1}"
        rest = ".".join(str(p) for p in path[2:])
        return f"{head}: {rest}: " if rest else f"{head}: "
    return ".".join(str(p) for p in path) + ": "


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
                    f"{_where(('steps', i, 'timeout'), doc)}timeout {timeout} is shorter than a call can "
                    f"take ({MIN_TIMEOUT_MS // 1000}s at least; leave it out for the action's limit)",
                )
            )
        uses = step.get("uses")
        if isinstance(uses, str):
            try:
                ActionRef.parse(uses)
            except RefError as exc:
                problems.append(
                    (*doc.position(("steps", i, "uses")), f"{_where(('steps', i), doc)}uses: {exc}")
                )
        elif "uses" in step:
            problems.append(
                (
                    *doc.position(("steps", i, "uses")),
                    f"{_where(('steps', i), doc)}uses: must be an action ref such as "
                    f"com.example.tools/echo/echo@1, got {_short(uses)}",
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
