"""Checks of a routine's expressions and of its `with:` values against the actions' inputSchemas.

Both work on the raw YAML data (so they run even when the pydantic models refuse the file) and
return `(line, column, message)` triples; engine.validate gathers them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import jsonschema

from engine import expressions as ex
from engine.yaml_positions import Located, Path
from packs.schemas import Validator

if TYPE_CHECKING:
    from engine.validate import ActionResolver

Triple = tuple[int, int, str]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _step_label(step: Any, i: int) -> str:
    sid = step.get("id") if isinstance(step, dict) else None
    return f"step '{sid}'" if isinstance(sid, str) else f"step {i + 1}"


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

    A step reads `inputs.<declared name>`, `steps.<id>.output|status` of earlier steps only, and
    `item`/`index` only in `with:` of a step with `foreach:`. Outputs read any step.
    """
    problems: list[Triple] = []
    steps = _as_list(data.get("steps"))
    order: dict[str, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, dict) and isinstance(step.get("id"), str):
            order.setdefault(step["id"], i)
    inputs = _as_dict(data.get("inputs"))
    scope = _Scope(order=order, inputs=set(inputs), position=len(steps), foreach=False, where="outputs")
    outputs = data.get("outputs")
    if isinstance(outputs, dict):
        for path, text in _strings(outputs, ("outputs",)):
            problems.extend(_check_template(doc, path, text, scope))
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        label = _step_label(step, i)
        has_foreach = step.get("foreach") is not None
        for key in ("if", "foreach"):
            value = step.get(key)
            here = _Scope(order, set(inputs), i, False, f"{label}: {key}")
            if isinstance(value, str):
                problems.extend(_check_bare(doc, ("steps", i, key), value, here))
                if key == "foreach":
                    problems.extend(_foreach_of_input(doc, ("steps", i, key), value, inputs, here))
            elif key == "foreach" and isinstance(value, list):
                for path, text in _strings(value, ("steps", i, key)):
                    problems.extend(_check_template(doc, path, text, here))
        with_ = step.get("with")
        if isinstance(with_, dict):
            here = _Scope(order, set(inputs), i, has_foreach, f"{label}: with")
            for path, text in _strings(with_, ("steps", i, "with")):
                problems.extend(_check_template(doc, path, text, here))
    return problems


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
    def __init__(self, order: dict[str, int], inputs: set[str], position: int, foreach: bool, where: str):
        self.order = order
        self.inputs = inputs
        self.position = position
        self.foreach = foreach
        self.where = where


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
        return [(*at(err.offset), f"{scope.where}: ${{{{ {expr} }}}}: {err.problem}")]
    problems: list[Triple] = []
    where = f"{scope.where}: ${{{{ {expr} }}}}"
    for ref in refs:
        message = _scope_problem(ref, scope)
        if message:
            problems.append((*at(0), f"{where}: {message}"))
    for name in dict.fromkeys(ex.functions(expr)):
        if name not in ex.FUNCTIONS:
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
        if scope.order[sid] > scope.position:
            return f"steps.{sid} runs later: a step reads only the steps before it"
        if len(ref.path) > 1 and ref.path[1] not in ex.STEP_FIELDS:
            return f"steps.{sid}.{ref.path[1]}: a step has output and status"
        return None
    if ref.root in ex.FOREACH_NAMES:
        if scope.foreach:
            return None
        return f"'{ref.root}' exists only in with: of a step with foreach:"
    names = ["inputs", "steps", *(["item", "index"] if scope.foreach else [])]
    return f"unknown name '{ref.root}' (in scope: {', '.join(names)})"


def check_with(data: dict[str, Any], doc: Located, resolver: ActionResolver) -> list[Triple]:
    """Each `uses:` resolves, and literal `with:` values fit the action's inputSchema."""
    problems: list[Triple] = []
    steps = _as_list(data.get("steps"))
    cache: dict[str, dict[str, Any] | None | Exception] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("uses"), str):
            continue
        ref = step["uses"]
        label = _step_label(step, i)
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
    props = _as_dict(schema.get("properties"))
    at_with = ("steps", i, "with") if "with" in doc.get(("steps", i)) else ("steps", i, "uses")
    for name in _as_list(schema.get("required")):
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
        validator = Validator(partial)
        errors = list(validator.iter_errors(literal))
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
