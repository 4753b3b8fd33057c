"""The tool's answer checked before it is returned or priced: output files first, then `outputSchema`.

A bad output file is `tool_failed` with reason `output_file`; an output that does not match its
schema is `tool_failed` with reason `output_invalid` and the schema's `errors`; output files of
more than 256 KiB in all are `output_too_large`.
"""

from __future__ import annotations

from typing import Any

from api.calls.errors import ToolFailed
from api.calls.files import FileValueError, check_output_file, file_fields
from api.calls.inputs import schema_errors

MAX_OUTPUT_FILE_BYTES = 256 * 1024


def check_output(schema: dict[str, Any], output: Any) -> dict[str, Any]:
    """Check a tool's output against the action's `outputSchema` and its file declarations.

    Returns:
        The output, unchanged.

    Raises:
        ToolFailed: reason `output_file`, `output_too_large` or `output_invalid` (with `errors`).
    """
    if not isinstance(output, dict):
        errors = [{"path": "output", "message": f"must be a JSON object, not {type(output).__name__}"}]
        raise ToolFailed(
            "the tool's output is not a JSON object", reason="output_invalid", details={"errors": errors}
        )
    total = 0
    for name, produces in file_fields(schema, "produces").items():
        if name in output:
            try:
                total += check_output_file(name, output[name], produces)
            except FileValueError as exc:
                raise ToolFailed(
                    f"the tool's output file is not usable: {exc}", reason="output_file"
                ) from None
    if total > MAX_OUTPUT_FILE_BYTES:
        raise ToolFailed(
            f"the tool's output files have {total} bytes in all, more than {MAX_OUTPUT_FILE_BYTES}",
            reason="output_too_large",
        )
    errors = schema_errors(schema, output, "output")
    if errors:
        first = errors[0]
        raise ToolFailed(
            f"the tool's output does not match its outputSchema: {first['path']}: {first['message']}",
            reason="output_invalid",
            details={"errors": errors},
        )
    return output
