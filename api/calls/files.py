"""File values of an action call: `{"$bytes": "<base64>", "name": "<name>"}` in, and out with size and type.

A file field is a top-level property of `type: object` that carries `x-b3os-file`: `{"accept": [...]}`
in an input schema, `{"produces": [...]}` in an output schema.

The content type of an input file is the caller's `"contentType"` when given (the caller knows best,
and names like `data` carry no extension); otherwise it comes from the name's extension with the
standard library's built-in table (no system files, so every host answers the same), and a name
it does not know is `application/octet-stream`. A type is accepted when the list names it exactly,
or names `type/*` or `*/*`. Parameters (`; charset=utf-8`) are ignored for the comparison.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from dataclasses import dataclass
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CONTENT_TYPE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9*][A-Za-z0-9!#$&^_.+*-]*$")
OCTET_STREAM = "application/octet-stream"
INPUT_KEYS = frozenset({"$bytes", "name", "contentType"})
OUTPUT_KEYS = frozenset({"$bytes", "name", "bytes", "contentType"})

# MimeTypes() without file names uses only the built-in table: the same answer on every host.
_TYPES = mimetypes.MimeTypes(filenames=())


class FileValueError(ValueError):
    """A file value is malformed; the message names the field and the value."""


@dataclass(frozen=True)
class FileValue:
    """One decoded file value."""

    field: str
    name: str
    content_type: str
    data: bytes

    def wire(self) -> dict[str, Any]:
        """The value as the node receives it: base64 bytes, name and content type."""
        return {
            "$bytes": base64.b64encode(self.data).decode("ascii"),
            "name": self.name,
            "contentType": self.content_type,
        }


def file_fields(schema: Any, marker: str) -> dict[str, list[str]]:
    """The file fields of a schema and their content-type lists.

    Args:
        schema: an `inputSchema` or `outputSchema`.
        marker: `"accept"` for an input schema, `"produces"` for an output schema.

    Returns:
        field name -> the content types the field takes.
    """
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return {}
    fields: dict[str, list[str]] = {}
    for name, prop in schema["properties"].items():
        ext = prop.get("x-b3os-file") if isinstance(prop, dict) else None
        if isinstance(ext, dict):
            fields[name] = [str(t) for t in ext.get(marker, [])]
    return fields


def content_type_for(name: str) -> str:
    """The content type a file name implies, `application/octet-stream` when its extension is unknown."""
    guessed, _ = _TYPES.guess_type(name, strict=False)
    return guessed or OCTET_STREAM


def accepts(allowed: list[str], content_type: str) -> bool:
    """Whether a content type is one of `allowed` (exact, `type/*` or `*/*`), ignoring parameters."""
    bare = content_type.split(";", 1)[0].strip().lower()
    major = bare.split("/", 1)[0]
    for entry in allowed:
        want = entry.split(";", 1)[0].strip().lower()
        if want in (bare, "*/*", f"{major}/*"):
            return True
    return False


def _decode(where: str, raw: Any) -> bytes:
    if not isinstance(raw, str):
        raise FileValueError(f'{where}."$bytes" must be a base64 string, not {_short(raw)}')
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise FileValueError(f'{where}."$bytes" is not valid base64: {_short(raw)}') from None


def _check_name(where: str, name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise FileValueError(
            f"{where}.name {_short(name)} is not a file name: it must match {NAME_PATTERN.pattern}"
        )
    return name


def parse_input_file(field: str, value: Any, accept: list[str]) -> FileValue:
    """Check one input file value and find its content type.

    Raises:
        FileValueError: with a sentence naming `input.<field>` and the offending value.
    """
    where = f"input.{field}"
    if not isinstance(value, dict) or "$bytes" not in value or "name" not in value:
        raise FileValueError(
            f'{where} must be a file value {{"$bytes": "<base64>", "name": "<name>"}}, not {_short(value)}'
        )
    extra = sorted(set(value) - INPUT_KEYS)
    if extra:
        raise FileValueError(
            f"{where} has an unexpected key {extra[0]!r}: a file value takes "
            '"$bytes", "name" and an optional "contentType"'
        )
    data = _decode(where, value["$bytes"])
    name = _check_name(where, value["name"])
    given = value.get("contentType")
    if given is not None and (
        not isinstance(given, str) or not CONTENT_TYPE_PATTERN.match(given.split(";")[0])
    ):
        raise FileValueError(f"{where}.contentType {_short(given)} is not a content type such as text/plain")
    content_type = (
        given.split(";", 1)[0].strip().lower() if isinstance(given, str) else content_type_for(name)
    )
    if accept and not accepts(accept, content_type):
        origin = "given" if given is not None else f"from the name {name}"
        raise FileValueError(
            f"{where}: content type {content_type} ({origin}) is not accepted; "
            f"the action accepts {', '.join(accept)}"
        )
    return FileValue(field=field, name=name, content_type=content_type, data=data)


def check_output_file(field: str, value: Any, produces: list[str]) -> int:
    """Check one output file value from the node; return its size in bytes.

    Raises:
        FileValueError: with a sentence naming `output.<field>`.
    """
    where = f"output.{field}"
    if not isinstance(value, dict) or set(value) != OUTPUT_KEYS:
        raise FileValueError(
            f'{where} is not a file value {{"$bytes", "name", "bytes", "contentType"}}: {_short(value)}'
        )
    data = _decode(where, value["$bytes"])
    _check_name(where, value["name"])
    if value["bytes"] != len(data):
        raise FileValueError(
            f"{where}.bytes says {_short(value['bytes'])} but the file has {len(data)} bytes"
        )
    content_type = value["contentType"]
    if not isinstance(content_type, str) or (produces and not accepts(produces, content_type)):
        raise FileValueError(
            f"{where}: content type {_short(content_type)} is not one the action produces "
            f"({', '.join(produces)})"
        )
    return len(data)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
