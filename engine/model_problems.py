"""The routine models' refusals of a file (pydantic's errors) as problems at their line and column, in the
routine language's words, as `(line, column, message)` triples that engine.validate gathers.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.routine import EventTrigger, RetryPolicy, Routine, ScheduleTrigger, Step
from engine.yaml_positions import Located

Triple = tuple[int, int, str]

_FIELDS: dict[str, list[str]] = {
    "routine": [f.alias or n for n, f in Routine.model_fields.items()],
    "step": [f.alias or n for n, f in Step.model_fields.items()],
    "retry": [f.alias or n for n, f in RetryPolicy.model_fields.items()],
    "trigger": [f.alias or n for n, f in EventTrigger.model_fields.items()],
    "schedule": [f.alias or n for n, f in ScheduleTrigger.model_fields.items()],
}


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


def model_problems(exc: ValidationError, doc: Located) -> list[Triple]:
    """The models' refusals of a routine file, each at its line and column, in the routine language's words
    (an unknown field names the fields allowed there; one problem per place, whatever the union's members
    say)."""
    problems: list[Triple] = []
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
                (
                    *doc.key_position(loc),
                    f"{where(parent, doc)}unknown field '{key}'"
                    + (f"; the fields of a {owner} are {allowed}" if allowed else ""),
                )
            )
            continue
        if kind == "missing":
            parent = loc[:-1]
            problems.append((*doc.position(parent), f"{where(parent, doc)}missing field '{loc[-1]}'"))
            continue
        path = doc.known_prefix(loc)
        if path in seen:
            continue  # a union reports one error per member type: one problem is enough
        seen.add(path)
        if path[-1:] == ("uses",):
            continue  # reported with the ref's own sentence by engine.validate
        at = doc.key_position(loc[:-1]) if loc[-1:] == ("[key]",) else doc.position(path)
        problems.append((*at, _message(path, err, doc, loc)))
    return problems


def _message(path: tuple[Any, ...], err: Any, doc: Located, loc: tuple[Any, ...]) -> str:
    field = str(path[-1]) if path else ""
    value = err.get("input")
    at = where(path, doc)
    if loc[-1:] == ("[key]",):
        return (
            f"{at}input name {field!r} is not accepted: use letters, digits and _ "
            "(inputs.<name> must read it), such as my_input"
        )
    if field == "id" and err["type"] == "string_pattern_mismatch":
        return (
            f"{at}step id {value!r} is not accepted: use letters, digits and _, starting with a "
            "letter or _ (steps.<id> must read it), such as fetch_page"
        )
    if field == "name" and len(path) == 1 and err["type"] == "string_pattern_mismatch":
        return (
            f"routine name {value!r} is not accepted: "
            "use lowercase letters, digits and hyphens, such as hello-world"
        )
    if field in ("timeout", "backoff", "max-backoff") and err["type"] == "string_pattern_mismatch":
        return f"{at}{value!r} is not a duration: use a whole number and a unit, such as 500ms, 30s, 2m or 1h"
    if field == "trigger" and err["type"] == "string_pattern_mismatch":
        return (
            f"{at}{value!r} is not a trigger ref: use ns/pack/trigger@1 or @1.0.0, such as "
            "io.b3os/github/issue-opened@1"
        )
    if field == "foreach":
        return f"{at}must be an expression such as ${{{{ inputs.names }}}} or a list, got {value!r}"
    if field == "if":
        return f"{at}must be an expression such as steps.a.status == 'succeeded', got {value!r}"
    if err["type"] == "value_error":  # our own validators' sentences name the value already
        return f"{at}{str(err['msg']).removeprefix('Value error, ')}"
    return f"{at}{err['msg'][0].lower()}{err['msg'][1:]}, got {short(value)}"


def short(value: Any) -> str:
    """A value as a message shows it: its repr, cut to 60 characters."""
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


def where(path: tuple[Any, ...], doc: Located) -> str:
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
