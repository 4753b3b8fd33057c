"""Input validation, defaults, file values and output checks of an action call."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from api.calls.errors import CallInvalid, ToolFailed
from api.calls.inputs import check_input
from api.calls.outputs import check_output

ECHO_IN: dict[str, Any] = {
    "type": "object",
    "required": ["text"],
    "additionalProperties": False,
    "properties": {
        "text": {"type": "string", "maxLength": 10000},
        "repeat": {"type": "integer", "default": 1, "minimum": 1},
        "opts": {"type": "object", "properties": {"upper": {"type": "boolean", "default": False}}},
        "file": {"type": "object", "x-b3os-file": {"accept": ["text/plain", "application/octet-stream"]}},
        "image": {"type": "object", "x-b3os-file": {"accept": ["image/*"]}},
    },
}
ECHO_OUT: dict[str, Any] = {
    "type": "object",
    "required": ["text"],
    "additionalProperties": False,
    "properties": {
        "text": {"type": "string"},
        "file": {"type": "object", "x-b3os-file": {"produces": ["text/plain"]}},
    },
}


def test_defaults_are_filled_in_and_files_get_a_content_type_from_their_name() -> None:
    raw = {"text": "hi", "opts": {}, "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}}
    checked = check_input(ECHO_IN, raw)
    assert checked.wire() == {
        "text": "hi",
        "repeat": 1,
        "opts": {"upper": False},
        "file": {"$bytes": "aGVsbG8K", "name": "hello.txt", "contentType": "text/plain"},
    }
    assert checked.file_fields == ["file"]
    assert raw == {"text": "hi", "opts": {}, "file": {"$bytes": "aGVsbG8K", "name": "hello.txt"}}


def test_a_given_content_type_wins_over_the_name() -> None:
    checked = check_input(
        ECHO_IN, {"text": "x", "image": {"$bytes": "iVBO", "name": "pic", "contentType": "image/png"}}
    )
    assert checked.wire()["image"]["contentType"] == "image/png"


def test_an_unknown_extension_is_octet_stream() -> None:
    checked = check_input(ECHO_IN, {"text": "x", "file": {"$bytes": "AAEC", "name": "blob.zzz"}})
    assert checked.files[0].content_type == "application/octet-stream"
    assert checked.files[0].data == b"\x00\x01\x02"


@pytest.mark.parametrize(
    ("value", "sentence"),
    [
        ({}, "input: 'text' is a required property"),
        ({"text": 5}, "input.text: 5 is not of type 'string'"),
        ({"text": "x", "extra": 1}, "input: Additional properties are not allowed ('extra' was unexpected)"),
        ({"text": "x", "repeat": 0}, "input.repeat: 0 is less than the minimum of 1"),
        (
            {"text": "x", "file": {"$bytes": "aGVsbG8K", "name": "../etc/passwd"}},
            "input.file.name '../etc/passwd'",
        ),
        (
            {"text": "x", "file": {"$bytes": "not base64!", "name": "a.txt"}},
            'input.file."$bytes" is not valid base64',
        ),
        ({"text": "x", "file": {"$bytes": "aGVsbG8K"}}, 'input.file must be a file value {"$bytes"'),
        (
            {"text": "x", "file": {"$bytes": "", "name": "a.txt", "url": "x"}},
            "input.file has an unexpected key 'url'",
        ),
        (
            {"text": "x", "image": {"$bytes": "", "name": "a.txt"}},
            "input.image: content type text/plain (from the name",
        ),
        (
            {"text": "x", "image": {"$bytes": "", "name": "a", "contentType": "nonsense"}},
            "input.image.contentType 'nonsense' is not a content type",
        ),
    ],
)
def test_bad_input_is_refused_with_a_sentence_naming_the_field(value: dict[str, Any], sentence: str) -> None:
    with pytest.raises(CallInvalid) as info:
        check_input(ECHO_IN, value)
    assert info.value.status == 400
    assert info.value.body()["error"]["code"] == "invalid_request"
    assert info.value.message.startswith(sentence), info.value.message
    error = info.value.body()["error"]
    assert error["errors"][0]["path"].startswith("input")
    assert error["field"] == error["errors"][0]["path"]  # what the SDKs' InvalidRequest names


def test_a_long_value_is_cut_in_the_sentence() -> None:
    with pytest.raises(CallInvalid) as info:
        check_input(ECHO_IN, {"text": "a" * 10001})
    assert len(info.value.message) < 300
    assert info.value.message.endswith("...")


def test_an_input_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(CallInvalid, match="input must be a JSON object, not list"):
        check_input(ECHO_IN, [1])


def _out_file(
    data: bytes, name: str = "hello.txt", ctype: str = "text/plain", size: int | None = None
) -> dict:
    return {
        "$bytes": base64.b64encode(data).decode(),
        "name": name,
        "bytes": len(data) if size is None else size,
        "contentType": ctype,
    }


def test_a_valid_output_with_a_file_passes() -> None:
    out = {"text": "hi", "file": _out_file(b"hello\n")}
    assert check_output(ECHO_OUT, out) == out


@pytest.mark.parametrize(
    ("output", "reason", "sentence"),
    [
        ({"txt": "hi"}, "output_invalid", "output: 'text' is a required property"),
        ({"text": 1}, "output_invalid", "output.text: 1 is not of type 'string'"),
        ("hi", "output_invalid", "the tool's output is not a JSON object"),
        (
            {"text": "x", "file": _out_file(b"x", ctype="image/png")},
            "output_file",
            "content type 'image/png'",
        ),
        ({"text": "x", "file": _out_file(b"x", size=7)}, "output_file", "output.file.bytes says 7"),
        ({"text": "x", "file": _out_file(b"x", name=".hidden")}, "output_file", "output.file.name '.hidden'"),
        ({"text": "x", "file": _out_file(b"x" * (256 * 1024 + 1))}, "output_too_large", "262145 bytes"),
    ],
)
def test_a_bad_output_is_a_tool_failure(output: Any, reason: str, sentence: str) -> None:
    with pytest.raises(ToolFailed) as info:
        check_output(ECHO_OUT, output)
    body = info.value.body()["error"]
    assert (info.value.status, body["code"], body["reason"]) == (502, "tool_failed", reason)
    assert sentence in body["message"]
    if reason == "output_invalid":
        assert body["errors"][0]["path"].startswith("output")


def test_a_steps_output_file_value_is_an_input_file_value() -> None:
    produced = {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": 6, "contentType": "text/plain"}
    checked = check_input(ECHO_IN, {"text": "x", "file": produced})
    assert checked.wire()["file"] == {"$bytes": "aGVsbG8K", "name": "hello.txt", "contentType": "text/plain"}
    assert checked.files[0].data == b"hello\n"


@pytest.mark.parametrize("size", [5, "6", True, None])
def test_an_input_file_whose_bytes_is_not_its_decoded_length_is_refused(size: object) -> None:
    value = {"$bytes": "aGVsbG8K", "name": "hello.txt", "bytes": size}
    with pytest.raises(CallInvalid) as info:
        check_input(ECHO_IN, {"text": "x", "file": value})
    assert str(info.value) == f"input.file.bytes says {size!r} but the file has 6 bytes"
    assert info.value.detail["errors"] == [{"path": "input.file", "message": str(info.value)}]
    assert info.value.detail["field"] == "input.file"
