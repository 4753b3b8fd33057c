"""Checks of a routine's expressions (their syntax, scope and lengths), and of its `with:` values against
the actions' inputSchemas (its sizes: engine.routine_sizes).

All work on the raw YAML data (so they run even when the pydantic models refuse the file) and
return `(line, column, message)` triples; engine.validate gathers them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import jsonschema

from engine import expressions as ex
from engine.raw_routine import as_dict, as_list, step_label
from engine.routine_needs import explicit_needs, readable_steps
from engine.yaml_positions import Located, Path
from packs.cel_syntax import MAX_EXPRESSION_CHARS, MAX_FIELD_EXPRESSION_CHARS, MAX_ROUTINE_EXPRESSION_CHARS
from packs.schemas import schema_errors

if TYPE_CHECKING:
    from engine.resolvers import ActionResolver

Triple = tuple[int, int, str]


def _strings(value: Any, path: Path) -> Iterator[tuple[Path, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, (*path, i))


def check_expressions(data: dict[str, Any], doc: Located) -> list[Triple]:
    """Syntax and scope of every expression in `with:`, `if:`, `foreach:` and `outputs`.

    A step reads `inputs.<declared name>`, `steps.<id>.output|status` of the steps it needs (directly
    or through others; without `needs:`, every step before it), and `item`/`index` only in `with:` of
    a step with `foreach:`. Outputs read any step. The status functions (`success()`, ...) are called
    only in `if:`, with no argument. A routine whose expressions hold more than
    MAX_ROUTINE_EXPRESSION_CHARS characters in all gets that one problem, and none is parsed.
    """
    too_many = _routine_length(data, doc)
    if too_many:
        return too_many
    problems: list[Triple] = []
    steps = as_list(data.get("steps"))
    order: dict[str, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, dict) and isinstance(step.get("id"), str):
            order.setdefault(step["id"], i)
    readable, explicit = readable_steps(data), explicit_needs(data)
    inputs = as_dict(data.get("inputs"))
    on = data.get("on")
    event = isinstance(on, list) and any(isinstance(item, dict) and "trigger" in item for item in on)
    scope = _Scope(order, set(inputs), len(steps), False, "outputs", frozenset(order), event=event)
    outputs = data.get("outputs")
    if isinstance(outputs, dict):
        for path, text in _strings(outputs, ("outputs",)):
            problems.extend(_check_template(doc, path, text, scope))
        problems.extend(_field_length(doc, ("outputs",), outputs, "outputs"))
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        label = step_label(step, i)
        has_foreach = step.get("foreach") is not None
        sid = step.get("id")
        reads = readable.get(sid, frozenset()) if isinstance(sid, str) else frozenset()
        needs = sid in explicit
        for key in ("if", "foreach", "with"):
            problems.extend(_field_length(doc, ("steps", i, key), step.get(key), f"{label}: {key}"))
        for key in ("if", "foreach"):
            value = step.get(key)
            here = _Scope(order, set(inputs), i, False, f"{label}: {key}", reads, needs, key, event)
            if isinstance(value, str):
                problems.extend(_check_bare(doc, ("steps", i, key), value, here))
                if key == "foreach":
                    problems.extend(_foreach_of_input(doc, ("steps", i, key), value, inputs, here))
            elif key == "foreach" and isinstance(value, list):
                for path, text in _strings(value, ("steps", i, key)):
                    problems.extend(_check_template(doc, path, text, here))
        with_ = step.get("with")
        if isinstance(with_, dict):
            here = _Scope(order, set(inputs), i, has_foreach, f"{label}: with", reads, needs, "with", event)
            for path, text in _strings(with_, ("steps", i, "with")):
                problems.extend(_check_template(doc, path, text, here))
    return problems


def _fields(data: dict[str, Any]) -> Iterator[tuple[Path, str, Any]]:
    """The fields that hold expressions, named as problems name them: each step's `if:`, `foreach:` and
    `with:`, then the routine's `outputs`."""
    for i, step in enumerate(as_list(data.get("steps"))):
        for key in ("if", "foreach", "with"):
            yield ("steps", i, key), f"{step_label(step, i)}: {key}", as_dict(step).get(key)
    yield ("outputs",), "outputs", data.get("outputs")


def _lengths(path: Path, value: Any) -> list[int]:
    """The length of each of a field's expressions."""
    if value is None:
        return []
    if isinstance(value, str) and ex.OPEN not in value and path[-1] in ("if", "foreach"):
        return [len(value.strip())]  # a bare `if:` or `foreach:` expression
    return [len(expr) for expr in ex.iter_expressions(value)]


def _routine_length(data: dict[str, Any], doc: Located) -> list[Triple]:
    """The expressions of the routine hold at most MAX_ROUTINE_EXPRESSION_CHARS characters in all (the
    problem is put at the field that passes the cap). An expression or a field over its own cap counts
    one character past that cap: its own problem, found without parsing it, is the one to say."""
    total = 0
    for path, where, value in _fields(data):
        field = sum(min(n, MAX_EXPRESSION_CHARS + 1) for n in _lengths(path, value))
        total += min(field, MAX_FIELD_EXPRESSION_CHARS + 1)
        if total > MAX_ROUTINE_EXPRESSION_CHARS:
            message = (
                f"{where}: the routine's expressions pass here the {MAX_ROUTINE_EXPRESSION_CHARS:,} "
                f"characters one routine may have in all ({total:,} up to this field): split the work "
                "across routines"
            )
            return [(*doc.position(path), message)]
    return []


def _field_length(doc: Located, path: Path, value: Any, where: str) -> list[Triple]:
    """The expressions of one field hold at most MAX_FIELD_EXPRESSION_CHARS characters in all."""
    total = sum(_lengths(path, value))
    if total <= MAX_FIELD_EXPRESSION_CHARS:
        return []
    message = (
        f"{where}: its expressions hold {total:,} characters in all, more than the "
        f"{MAX_FIELD_EXPRESSION_CHARS:,} one field may have: split the work across steps"
    )
    return [(*doc.position(path), message)]


def _foreach_of_input(
    doc: Located, path: Path, text: str, inputs: dict[str, Any], scope: _Scope
) -> list[Triple]:
    """`foreach: ${{ inputs.x }}` over an input whose declared type is not an array cannot give a list."""
    try:
        expr = ex.condition_expression(text)
    except ex.ExpressionSyntaxError:
        return []  # reported by the syntax check
    name = expr.removeprefix("inputs.")
    spec = inputs.get(name) if expr.startswith("inputs.") else None
    declared = spec.get("type") if isinstance(spec, dict) else None
    if declared is None or declared == "array":
        return []
    message = f"{scope.where}: inputs.{name} is a {declared} input: foreach needs a list"
    return [(*doc.position(path), message)]


class _Scope:
    def __init__(
        self,
        order: dict[str, int],
        inputs: set[str],
        position: int,
        foreach: bool,
        where: str,
        readable: frozenset[str],
        needs: bool = False,
        field: str = "outputs",
        event: bool = False,
    ):
        self.order = order
        self.inputs = inputs
        self.position = position
        self.foreach = foreach
        self.where = where
        self.readable = readable  # the steps this one needs, directly or through others
        self.needs = needs  # the step sets needs:
        self.field = field  # if, foreach, with or outputs
        self.event = event  # the routine subscribes to a trigger: `event` is the event that started the run


def _check_bare(doc: Located, path: Path, text: str, scope: _Scope) -> list[Triple]:
    """An `if:` or `foreach:` string: one expression, bare or in `${{ }}`."""
    if ex.OPEN in text:
        try:
            whole = ex.whole_expression(text)
        except ex.ExpressionSyntaxError as err:
            return [(*doc.position(path), f"{scope.where}: {err.problem}")]
        if whole is None:
            return [
                (
                    *doc.position(path),
                    f"{scope.where}: must be one expression, bare or in ${{{{ }}}}, "
                    "not text with expressions inside",
                )
            ]
        return _check_template(doc, path, text, scope)
    lead = len(text) - len(text.lstrip())
    expr = text.strip()
    return _check_one(doc, path, expr, scope, lambda off: doc.offset_position(path, 0, expr, off), lead)


def _check_template(doc: Located, path: Path, text: str, scope: _Scope) -> list[Triple]:
    if ex.OPEN not in text:
        return []
    try:
        parts = ex.split_template(text)
    except ex.ExpressionSyntaxError as err:
        opened = text.count(ex.OPEN) - 1
        return [(*doc.offset_position(path, max(opened, 0), ex.OPEN, 0), f"{scope.where}: {err.problem}")]
    problems: list[Triple] = []
    k = 0
    for part in parts:
        if isinstance(part, ex.Expr):
            skip = part.body - part.start

            def at(off: int, k: int = k, skip: int = skip) -> tuple[int, int]:
                return doc.offset_position(path, k, ex.OPEN, skip + off)

            problems.extend(_check_one(doc, path, part.source, scope, at, 0))
            k += 1
    return problems


def _check_one(doc: Located, path: Path, expr: str, scope: _Scope, at: Any, lead: int) -> list[Triple]:
    try:
        refs = ex.references(expr)
    except ex.ExpressionSyntaxError as err:
        return [(*at(err.offset), f"{scope.where}: ${{{{ {ex.shown(expr)} }}}}: {err.problem}")]
    problems: list[Triple] = []
    where = f"{scope.where}: ${{{{ {ex.shown(expr)} }}}}"
    for ref in refs:
        message = _scope_problem(ref, scope)
        if message:
            problems.append((*at(0), f"{where}: {message}"))
    for call in dict.fromkeys(ex.status_calls(expr)):
        if scope.field != "if":
            problems.append(
                (*at(0), f"{where}: {call.name}() is a status function: it may be called only in if:")
            )
        elif not call.well_formed:
            problems.append((*at(0), f"{where}: {call.name}() takes no arguments: call it as {call.name}()"))
    for name in dict.fromkeys(ex.functions(expr)):
        if name not in ex.FUNCTIONS and name not in ex.STATUS_FUNCTIONS:
            problems.append((*at(0), f"{where}: there is no function {name}() in CEL"))
    return problems


def _scope_problem(ref: ex.Reference, scope: _Scope) -> str | None:
    if ref.root == "inputs":
        if ref.path and ref.path[0] not in scope.inputs:
            known = ", ".join(sorted(scope.inputs)) or "none declared"
            return f"no input '{ref.path[0]}' (inputs: {known})"
        return None
    if ref.root == "steps":
        if not ref.path:
            return "read one step as steps.<id>.output or steps.<id>.status"
        sid = ref.path[0]
        if sid not in scope.order:
            known = ", ".join(scope.order) or "none"
            return f"no step '{sid}' (steps: {known})"
        if scope.order[sid] == scope.position:
            return f"a step cannot read its own steps.{sid}"
        if sid not in scope.readable:
            if not scope.needs and scope.order[sid] > scope.position:
                return f"steps.{sid} runs later: a step reads only the steps before it"
            if not scope.needs:
                return (
                    f"steps.{sid} is not among the steps this step waits for (the step before it, and "
                    f"what that one waits for): list {sid} in its needs:"
                )
            return (
                f"steps.{sid} is not among the steps this step needs, directly or through others: "
                f"add {sid} to its needs:"
            )
        if len(ref.path) > 1 and ref.path[1] not in ex.STEP_FIELDS:
            return f"steps.{sid}.{ref.path[1]}: a step has output and status"
        return None
    if ref.root in ex.FOREACH_NAMES:
        if scope.foreach:
            return None
        return f"'{ref.root}' exists only in with: of a step with foreach:"
    if ref.root == "event":
        if scope.event:
            return None
        return "'event' exists only in a routine started by a trigger (on: [{trigger: ns/pack/key@1}])"
    names = [
        "inputs",
        "steps",
        *(["event"] if scope.event else []),
        *(["item", "index"] if scope.foreach else []),
    ]
    return f"unknown name '{ref.root}' (in scope: {', '.join(names)})"


def check_with(data: dict[str, Any], doc: Located, resolver: ActionResolver) -> list[Triple]:
    """Each `uses:` resolves, and literal `with:` values fit the action's inputSchema."""
    problems: list[Triple] = []
    steps = as_list(data.get("steps"))
    cache: dict[str, dict[str, Any] | None | Exception] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("uses"), str):
            continue
        ref = step["uses"]
        label = step_label(step, i)
        if ref not in cache:
            try:
                cache[ref] = resolver.input_schema(ref)
            except Exception as exc:  # the resolver's own error: its sentence is the message
                cache[ref] = exc
        found = cache[ref]
        if isinstance(found, Exception):
            problems.append(
                (*doc.position(("steps", i, "uses")), f"{label}: uses: cannot resolve {ref}: {found}")
            )
            continue
        with_ = step.get("with", {})
        if found is None or not isinstance(with_, dict):
            continue
        problems.extend(_fit(doc, i, label, ref, with_, found))
    return problems


def _fit(
    doc: Located, i: int, label: str, ref: str, with_: dict[str, Any], schema: dict[str, Any]
) -> list[Triple]:
    problems: list[Triple] = []
    props = as_dict(schema.get("properties"))
    at_with = ("steps", i, "with") if "with" in doc.get(("steps", i)) else ("steps", i, "uses")
    for name in as_list(schema.get("required")):
        if name not in with_:
            problems.append(
                (*doc.key_position(at_with), f"{label}: with: missing required input '{name}' of {ref}")
            )
    if schema.get("additionalProperties") is False:
        for name in with_:
            if name not in props:
                known = ", ".join(props) or "none"
                problems.append(
                    (
                        *doc.key_position(("steps", i, "with", name)),
                        f"{label}: with: {ref} has no input '{name}' (inputs: {known})",
                    )
                )
    literal = {k: v for k, v in with_.items() if k in props and not ex.has_expressions(v)}
    partial = {k: v for k, v in schema.items() if k not in ("required", "additionalProperties")}
    try:
        errors = list(schema_errors(partial, literal))
    except jsonschema.exceptions._Error as exc:  # a broken schema in the registry: say so once
        return [
            *problems,
            (
                *doc.position(("steps", i, "uses")),
                f"{label}: uses: {ref} has an unusable inputSchema: {exc.message}",
            ),
        ]
    for error in errors:
        path = doc.known_prefix(("steps", i, "with", *error.absolute_path))
        field = ".".join(str(p) for p in error.absolute_path)
        problems.append((*doc.position(path), f"{label}: with.{field}: {error.message}"))
    return problems
