"""A schema's references stay within it (packs.schema_refs), and the validator fetches nothing and counts
unique items in linear time (packs.schemas)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from packs.schema_refs import reference_problem
from packs.schemas import CHECK_COST, MATCH_COST, Validator, schema_errors, schema_problem

NEVER_ENDS = (
    "comes back to itself without reading into the value: checking a value against it would never end"
)


@pytest.mark.parametrize(
    ("schema", "path", "sentence"),
    [
        ({"$ref": "#"}, ("$ref",), f"the $ref '#' {NEVER_ENDS}"),
        (
            {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}}},
            ("$defs", "a", "allOf", 0, "$ref"),
            f"the $ref '#/$defs/b' {NEVER_ENDS}",
        ),
        (
            {"properties": {"a": {"$ref": "https://schemas.example/a.json"}}},
            ("properties", "a", "$ref"),
            "the $ref 'https://schemas.example/a.json' is outside this schema: only references within it "
            "(#/...) are followed, nothing is fetched",
        ),
        ({"$ref": "other.json#/x"}, ("$ref",), None),
        ({"$ref": "#/$defs/gone"}, ("$ref",), "the $ref '#/$defs/gone' names nothing in this schema"),
        ({"$ref": "#nowhere"}, ("$ref",), "the $ref '#nowhere' names nothing in this schema"),
        (
            {"$dynamicRef": "#meta"},
            ("$dynamicRef",),
            "$dynamicRef is not supported: use $ref to a part of this schema",
        ),
        ({"items": {"$id": "https://x/y"}}, ("items", "$id"), "an $id is taken at the schema's root only"),
    ],
)
def test_a_reference_that_leaves_the_schema_names_nothing_or_never_ends_is_refused(
    schema: dict[str, Any], path: tuple[Any, ...], sentence: str | None
) -> None:
    found = reference_problem(schema)
    assert found is not None and found[0] == path, found
    if sentence is not None:
        assert found[1] == sentence
    assert schema_problem(schema) == found


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}},  # a tree
        {"$defs": {"n": {"$anchor": "n", "type": "string"}}, "properties": {"a": {"$ref": "#n"}}},
        {"$defs": {"a~b/c": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/a~0b~1c"}}},
        {"enum": [{"$ref": "https://not.a.reference/in/data"}], "default": {"$ref": "#"}},
        {
            "$id": "https://example.com/root.json",
            "properties": {"a": {"$ref": "#/$defs/x"}},
            "$defs": {"x": {}},
        },
    ],
)
def test_references_within_the_schema_and_ones_that_read_deeper_are_kept(schema: dict[str, Any]) -> None:
    assert reference_problem(schema) is None


def test_the_validator_fetches_no_reference_it_is_given() -> None:
    """A stored schema from before these checks: its remote reference is an error of the value, no fetch."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        accepted: list[Any] = []
        server.settimeout(0.5)
        waiter = threading.Thread(target=lambda: accepted.append(_accept(server)))
        waiter.start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/s.json"
        errors = [e.message for e in schema_errors({"$ref": url}, "anything")]
        waiter.join()
    assert errors == [f"the schema's reference {url!r} names nothing in it: it cannot be followed"]
    assert accepted == [None]  # nobody connected


def _accept(server: socket.socket) -> Any:
    try:
        connection, _ = server.accept()
    except TimeoutError:
        return None
    connection.close()
    return "connected"


def test_unique_items_are_json_equal_items_and_a_long_mixed_array_is_checked_once_through() -> None:
    def unique(items: list[Any]) -> bool:
        return not list(schema_errors({"uniqueItems": True}, items))

    assert not unique([1, "a", 1.0])  # 1 and 1.0 are the same number
    assert unique([1, True, "1", [1], {"a": 1}, None, 0, False])  # true is not 1, nor "1"
    assert not unique([{"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2}]}])
    assert unique([[1, 2], [2, 1]])
    mixed = [i if i % 2 else str(i) for i in range(15_000)]  # jsonschema's own compares every pair here
    assert unique(mixed) and not unique([*mixed, 14_999])


def test_a_pattern_whose_match_would_cost_too_much_fails_validation_with_a_sentence_before_matching() -> None:
    heavy = r"(a|b){1,1000}c"  # ~4,000 instructions: 100 KB of text took 4 s to match
    errors = [e.message for e in schema_errors({"type": "string", "pattern": heavy}, "ab" * 50_000)]
    assert len(errors) == 1 and errors[0].startswith("a text of 100,000 characters is too long to check")
    assert f"one match may cost {MATCH_COST:,} instructions times characters" in errors[0]
    assert not schema_errors({"type": "string", "pattern": heavy}, "ab" * 100 + "c")
    keyed = {"patternProperties": {heavy: {"type": "integer"}}}
    assert [e.message for e in schema_errors(keyed, {"ab" * 50_000: 1})][0].startswith("a text of 100,000")


def test_many_texts_each_within_the_match_bound_are_bounded_together() -> None:
    heavy = r"(a|b){1,1000}c"
    each = "ab" * 1_000  # 2,000 characters: ~8,000,000 each, within MATCH_COST
    schema = {"type": "array", "items": {"type": "string", "pattern": heavy}}
    errors = [e.message for e in schema_errors(schema, [each] * 200)]
    assert any(e.startswith("checking the value against its schema's patterns is more work") for e in errors)
    assert f"({CHECK_COST:,} instructions times characters)" in errors[-1]
    assert not schema_errors(schema, [each + "c"] * 5)  # a few are checked as usual


def test_a_schema_is_built_into_a_validator_once_and_each_schema_object_checks_against_itself() -> None:
    text = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    number = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert Validator(text) is Validator(text)  # an action's schema, call after call
    assert Validator(dict(text)) is not Validator(text)  # an equal schema that is another object
    for _ in range(2):  # the kept validators answer for their own schema, not the other's
        assert schema_errors(text, {"a": "x"}) == []
        assert [e.message for e in schema_errors(number, {"a": "x"})] == ["'x' is not of type 'integer'"]
        assert [e.message for e in schema_errors(text, {})] == ["'a' is a required property"]
