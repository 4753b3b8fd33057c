"""Checks of a routine's triggers (`on: [{trigger: ns/pack/key@1, with: {...}}]`) against the packs that
declare them: each ref resolves to a trigger, `with:` fits its inputSchema, `connection:` is one of its
connections, `inputs:` fit the routine's, and every `event.<field>` an expression reads is a field of
each trigger's eventSchema.

Works on the raw YAML data and returns `(line, column, message)` triples, as engine.routine_checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from engine import expressions as ex
from engine.routine import USES_PATTERN
from engine.yaml_positions import Located, Path
from packs.schemas import schema_errors

if TYPE_CHECKING:
    from engine.resolvers import ActionResolver
    from packs.triggers import Trigger

Triple = tuple[int, int, str]


def _trigger_items(data: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    on = data.get("on")
    for i, item in enumerate(on if isinstance(on, list) else []):
        if isinstance(item, dict) and isinstance(item.get("trigger"), str):
            yield i, item


def check_triggers(data: dict[str, Any], doc: Located, resolver: ActionResolver) -> list[Triple]:
    """Each trigger of `on:` resolves and its `with:` and `connection:` fit it; `event.<field>` reads
    fields its eventSchema has (when the resolver can find triggers)."""
    find = getattr(resolver, "trigger", None)
    if find is None:
        return []  # a resolver of actions only (the CLI over an older api): the api checks on store
    problems: list[Triple] = []
    found: list[tuple[str, Trigger]] = []
    for i, item in _trigger_items(data):
        ref, at = item["trigger"], ("on", i)
        if re.match(USES_PATTERN, ref) is None:
            continue  # the models say how a ref is written
        try:
            trigger: Trigger = find(ref)
        except Exception as exc:  # the resolver's own error: its sentence is the message
            problems.append(
                (*doc.position((*at, "trigger")), f"on[{i}]: trigger: cannot resolve {ref}: {exc}")
            )
            continue
        found.append((ref, trigger))
        with_ = item.get("with", {})
        if isinstance(with_, dict):
            if ex.has_expressions(with_):
                problems.append(
                    (
                        *doc.position((*at, "with")),
                        f"on[{i}]: with: a trigger's input is literal: ${{{{ }}}} is not evaluated there",
                    )
                )
            for error in schema_errors(trigger.input_schema, with_):
                field = ".".join(str(p) for p in error.absolute_path)
                path = doc.known_prefix((*at, "with", *error.absolute_path))
                problems.append(
                    (*doc.position(path), f"on[{i}]: with{'.' + field if field else ''}: {error.message}")
                )
        connection = item.get("connection")
        if isinstance(connection, str) and connection not in trigger.connections:
            known = ", ".join(trigger.connections) or "none"
            problems.append(
                (
                    *doc.position((*at, "connection")),
                    f"on[{i}]: connection: {ref} uses no connection {connection!r} (connections: {known})",
                )
            )
    if found:
        problems.extend(_event_fields(data, doc, found))
    return problems


def _event_fields(data: dict[str, Any], doc: Located, found: list[tuple[str, Trigger]]) -> list[Triple]:
    """Each `event.<field>` read in the steps and outputs is a property of every trigger's eventSchema."""
    problems: list[Triple] = []
    for path, where, value in _expression_fields(data):
        for expr in _expressions(value, path):
            try:
                refs = ex.references(expr)
            except ex.ExpressionSyntaxError:
                continue  # said by the syntax check
            for ref in refs:
                if ref.root != "event" or not ref.path:
                    continue
                for trigger_ref, trigger in found:
                    props = trigger.event_schema.get("properties")
                    if isinstance(props, dict) and ref.path[0] not in props:
                        fields = ", ".join(props) or "none"
                        problems.append(
                            (
                                *doc.position(path),
                                f"{where}: ${{{{ {ex.shown(expr)} }}}}: the events of "
                                f"{trigger_ref} have no field '{ref.path[0]}' (fields: {fields})",
                            )
                        )
    return problems


def _expression_fields(data: dict[str, Any]) -> Iterator[tuple[Path, str, Any]]:
    steps = data.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict):
            continue
        label = f"step '{step['id']}'" if isinstance(step.get("id"), str) else f"step {i + 1}"
        for key in ("if", "foreach", "with"):
            if key in step:
                yield ("steps", i, key), f"{label}: {key}", step[key]
    yield ("outputs",), "outputs", data.get("outputs")


def _expressions(value: Any, path: Path) -> Iterator[str]:
    if isinstance(value, str) and ex.OPEN not in value and path[-1] in ("if", "foreach"):
        yield value.strip()  # a bare if: or foreach: expression
    else:
        yield from ex.iter_expressions(value)
