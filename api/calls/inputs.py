"""An action call's input: checked against the action's `inputSchema`, defaults filled in, files decoded.

A file value is `{"$bytes", "name", "contentType"?}`; a step's output file value, which also has
`bytes` (its decoded size), is accepted as it is, so `file: ${{ steps.a.output.file }}` chains: the
size must equal the decoded length and is then dropped.

Defaults: before validation, every absent property whose schema has a `default` gets a copy of it,
recursively through nested `properties` of objects the input has, and through `items` of arrays.
Defaults behind `$ref`, `allOf`, `anyOf` or `oneOf` are not filled (which branch applies is only
known after validation). The caller's value is never modified.
"""

from __future__ import annotations

import base64
import binascii
import copy
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import ValidationError

from api.calls.errors import CallInvalid
from api.calls.files import FileValue, FileValueError, file_fields, parse_input_file
from packs import schemas

MAX_ERRORS = 10
MAX_MESSAGE = 240


@dataclass(frozen=True)
class CheckedInput:
    """A valid input: what the node receives, and the file fields that are present."""

    value: dict[str, Any]
    files: list[FileValue] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        """The input as the node receives it, each file with its content type."""
        out = dict(self.value)
        for f in self.files:
            out[f.field] = f.wire()
        return out

    @property
    def file_fields(self) -> list[str]:
        """The names of the file fields present in the input."""
        return [f.field for f in self.files]


def fill_defaults(schema: Any, value: Any) -> Any:
    """Return a copy of `value` with the schema's defaults filled in where properties are absent."""
    value = copy.deepcopy(value)
    _fill(schema, value)
    return value


def _fill(schema: Any, value: Any) -> None:
    if not isinstance(schema, dict):
        return
    props = schema.get("properties")
    if isinstance(value, dict) and isinstance(props, dict):
        for name, sub in props.items():
            if not isinstance(sub, dict):
                continue
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _fill(sub, value[name])
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        for item in value:
            _fill(items, item)


def schema_errors(schema: dict[str, Any], value: Any, root: str) -> list[dict[str, str]]:
    """Every way `value` fails `schema`, as `{"path", "message"}` with paths under `root`, in path order."""
    errors = sorted(schemas.schema_errors(schema, value), key=lambda e: list(map(str, e.absolute_path)))
    return [{"path": _path(root, e), "message": _message(e)} for e in errors[:MAX_ERRORS]]


def _path(root: str, error: ValidationError) -> str:
    parts = [root]
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else f".{p}")
    return "".join(parts)


def _message(error: ValidationError) -> str:
    text = error.message
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def without_size(field: str, value: Any) -> Any:
    """A file value without its `bytes` key, once that size is found to equal the decoded length.

    An output file value (`{"$bytes", "name", "bytes", "contentType"}`) is thereby an input file value.

    Raises:
        FileValueError: `bytes` is not the decoded length of `$bytes`.
    """
    if not isinstance(value, dict) or "bytes" not in value:
        return value
    rest = {k: v for k, v in value.items() if k != "bytes"}
    size = value["bytes"]
    raw = rest.get("$bytes")
    try:
        data = base64.b64decode(raw if isinstance(raw, str) else "?", validate=True)
    except (binascii.Error, ValueError):
        return rest  # parse_input_file names the bad "$bytes"
    if isinstance(size, bool) or not isinstance(size, int) or size != len(data):
        shown = repr(size) if len(repr(size)) <= 40 else repr(size)[:37] + "..."
        raise FileValueError(f"input.{field}.bytes says {shown} but the file has {len(data)} bytes")
    return rest


def check_input(schema: dict[str, Any], value: Any) -> CheckedInput:
    """Validate a call's input against the action's `inputSchema`, filling defaults and decoding files.

    Args:
        schema: the action's `inputSchema`.
        value: the caller's `input`.

    Returns:
        The checked input.

    Raises:
        CallInvalid: naming the first failing field and value (`field`, its path), with every failure in
            `errors`.
    """
    if not isinstance(value, dict):
        raise CallInvalid(
            f"input must be a JSON object, not {type(value).__name__}",
            details={"field": "input", "errors": [{"path": "input", "message": "must be an object"}]},
        )
    filled = fill_defaults(schema, value)
    errors = schema_errors(schema, filled, "input")
    if errors:
        first = errors[0]
        raise CallInvalid(
            f"{first['path']}: {first['message']}", details={"field": first["path"], "errors": errors}
        )
    files: list[FileValue] = []
    for name, accept in file_fields(schema, "accept").items():
        if name not in filled:
            continue
        try:
            files.append(parse_input_file(name, without_size(name, filled[name]), accept))
        except FileValueError as exc:
            path = f"input.{name}"
            raise CallInvalid(
                str(exc), details={"field": path, "errors": [{"path": path, "message": str(exc)}]}
            ) from None
    plain = {k: v for k, v in filled.items() if k not in {f.field for f in files}}
    return CheckedInput(value=plain, files=files)
