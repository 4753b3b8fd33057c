"""The JSON Schema (draft 2020-12) of the routine format, generated from the pydantic models.

Editors use it to complete and check routine files (`# yaml-language-server: $schema=...`); it is
committed as docs/routine.schema.json and printed by `b3os routine schema`.
"""

from __future__ import annotations

import json
from typing import Any

from engine.routine import Routine

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def routine_json_schema() -> dict[str, Any]:
    """The routine format as a JSON Schema: descriptions, patterns and enums from the models."""
    schema = Routine.model_json_schema(by_alias=True, mode="validation")
    schema = _tidy(schema)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "b3os routine",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def routine_json_schema_text() -> str:
    """The schema as the text committed in docs/routine.schema.json (2-space indent, final newline)."""
    return json.dumps(routine_json_schema(), indent=2, ensure_ascii=False) + "\n"


def _tidy(node: Any) -> Any:
    """Drop generated titles, and the `null` branch and `default: null` of optional fields.

    A routine author never writes `null` for an optional field; leaving it out means the same.
    """
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _tidy(_optional(prop)) for name, prop in value.items()}
        elif key == "$defs" and isinstance(value, dict):
            out[key] = {name: _tidy(item) for name, item in value.items()}
        else:
            out[key] = _tidy(value)
    return out


def _optional(prop: Any) -> Any:
    if not isinstance(prop, dict):
        return prop
    prop = {k: v for k, v in prop.items() if k != "title"}
    if prop.get("default", 0) is None:
        del prop["default"]
    branches = prop.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        del prop["anyOf"]
        if len(rest) == 1:
            prop = {**rest[0], **prop}
        else:
            prop["anyOf"] = rest
    return prop
