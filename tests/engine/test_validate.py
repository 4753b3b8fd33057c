"""Validation of routine files: every problem at once, each at its line and column."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from engine import yaml_positions
from engine.resolvers import ResolveError
from engine.run_inputs import RoutineInputError, resolve_inputs
from engine.validate import RoutineError, load_routine

ECHO = "com.example.tools/echo/echo@1"


def problems(text: str, resolver: Any = None) -> list[str]:
    """The problems of a routine as `line:column: message`."""
    with pytest.raises(RoutineError) as info:
        load_routine(textwrap.dedent(text).lstrip("\n"), "r.yaml", resolver)
    lines = info.value.lines()
    assert all(line.startswith("r.yaml:") for line in lines)
    return [line.removeprefix("r.yaml:") for line in lines]


def only(text: str, resolver: Any = None) -> str:
    found = problems(text, resolver)
    assert len(found) == 1, found
    return found[0]


def test_a_good_routine_loads_into_the_models() -> None:
    routine = load_routine(
        textwrap.dedent(f"""
        name: ok
        inputs:
          who: {{type: string, default: you}}
        steps:
          - id: a
            uses: {ECHO}
            with: {{text: "hi ${{{{ inputs.who }}}}"}}
            timeout: 2m
            retry: {{max-attempts: 5, backoff: 500ms}}
            continue-on-error: true
          - id: b
            uses: com.example.tools/echo/noop@1.0.0
            if: steps.a.status == "failed"
            foreach: [1, 2]
        outputs:
          text: ${{{{ steps.a.output.text }}}}
        """)
    )
    a, b = routine.steps
    assert a.with_ == {"text": "hi ${{ inputs.who }}"}
    assert a.timeout_timedelta is not None and a.timeout_timedelta.total_seconds() == 120
    assert (
        a.retry is not None and a.retry.max_attempts == 5 and a.retry.backoff_timedelta.total_seconds() == 0.5
    )
    assert a.continue_on_error is True
    assert b.if_ == 'steps.a.status == "failed"' and b.foreach == [1, 2]
    assert routine.inputs["who"].default == "you" and not routine.inputs["who"].required


def test_yaml_syntax_error_has_its_line() -> None:
    assert only("""
        name: x
        steps:
          - id: a
            uses: [unclosed
        """).startswith("5:1: YAML syntax error:")


def test_a_file_that_is_not_a_mapping_is_refused() -> None:
    assert only("- just\n- a list\n") == "1:1: a routine is a mapping with name and steps, got a list"
    assert only("") == "1:1: a routine is a mapping with name and steps, got an empty file"


def test_unknown_fields_are_named_with_their_line() -> None:
    found = problems(f"""
        name: x
        colour: blue
        steps:
          - id: a
            uses: {ECHO}
            with: {{text: hi}}
            retries: 3
            retry: {{max_attempts: 2}}
        """)
    assert found == [
        "2:1: unknown field 'colour'; the fields of a routine are name, description, inputs, max-parallel, "
        "steps, outputs, on",
        "7:5: step 'a': unknown field 'retries'; the fields of a step are id, uses, with, needs, if, "
        "timeout, retry, "
        "continue-on-error, foreach, name",
        "8:13: step 'a': retry: unknown field 'max_attempts'; the fields of a retry are "
        "max-attempts, backoff, "
        "backoff-coefficient, max-backoff",
    ]


def test_missing_fields_are_reported_where_they_belong() -> None:
    found = problems("""
        description: no name
        steps:
          - id: a
          - uses: com.example.tools/echo/echo@1
        """)
    assert found == [
        "1:1: missing field 'name'",
        "3:5: step 'a': missing field 'uses'",
        "4:5: step 2: missing field 'id'",
    ]


def test_no_steps_is_refused() -> None:
    assert (
        only("name: x\nsteps: []\n")
        == "2:8: steps: list should have at least 1 item after validation, not 0, got []"
    )


def test_duplicate_step_ids_name_the_first() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
          - id: a
            uses: {ECHO}
        """)
        == "5:9: duplicate step id 'a' (first at line 3)"
    )


def test_duplicate_yaml_keys_are_refused() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            with: {{text: a, text: b}}
        """)
        == "5:21: duplicate key 'text' (first at line 5)"
    )


def test_step_id_with_a_hyphen_is_refused_because_expressions_cannot_read_it() -> None:
    assert only(f"""
        name: x
        steps:
          - id: fetch-page
            uses: {ECHO}
        """) == (
        "3:9: step 'fetch-page': id: step id 'fetch-page' is not accepted: use letters, digits and "
        "_, starting "
        "with a letter or _ (steps.<id> must read it), such as fetch_page"
    )


@pytest.mark.parametrize(
    ("uses", "message"),
    [
        ("com.example.tools/echo@1", "action ref 'com.example.tools/echo@1' is not accepted"),
        ("com.example.tools/echo/echo", "action ref 'com.example.tools/echo/echo' has no version"),
        ("com.example.tools/echo/echo@latest", "version 'latest' is not accepted"),
        ("Com.Example/echo/echo@1", "namespace 'Com.Example' is not accepted"),
    ],
)
def test_bad_uses_refs_are_explained(uses: str, message: str) -> None:
    found = only(f"""
        name: x
        steps:
          - id: a
            uses: {uses}
        """)
    assert found.startswith("4:11: step 'a': uses: ") and message in found


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("timeout: 30 seconds", "    timeout: 30 seconds"),
        ("retry: {backoff: 1.5s}", "    retry: {backoff: 1.5s}"),
    ],
)
def test_bad_durations_are_refused(field: str, line: str) -> None:
    found = only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            {field}
        """)
    assert found.startswith("5:")
    assert "is not a duration: use a whole number and a unit, such as 500ms, 30s, 2m or 1h" in found


def test_retry_values_out_of_range_are_refused() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            retry:
              max-attempts: 0
        """)
        == "6:21: step 'a': retry.max-attempts: input should be greater than or equal to 1, got 0"
    )


def routine_of_texts(lengths: list[list[int]], extra: str = "") -> str:
    """A routine of one step per list of `lengths`, each a `with:` of CEL string literals of those
    lengths (quotes included); `extra` is added to the last step's `with:`."""
    steps = []
    for i, step in enumerate(lengths):
        fields = ", ".join(f"t{k}: '${{{{ \"{'a' * (n - 2)}\" }}}}'" for k, n in enumerate(step))
        more = extra if i == len(lengths) - 1 else ""
        steps.append(f"  - id: s{i}\n    uses: {ECHO}\n    with: {{{fields}{more}}}\n")
    return "name: long\nsteps:\n" + "".join(steps)


def test_a_routines_expressions_hold_at_most_32000_characters_in_all() -> None:
    at_the_cap = routine_of_texts([[2_000] * 4] * 4)  # 16 expressions of 2,000: 8,000 a field
    assert len(load_routine(at_the_cap).steps) == 4
    # a fifth step's `""` and a broken expression pass it: that one problem, nothing was parsed
    over = routine_of_texts([[2_000] * 4] * 4 + [[2]], extra=", bad: '${{ input.( }}'")
    assert only(over) == (
        "17:11: step 's4': with: the routine's expressions pass here the 32,000 characters one routine "
        "may have in all (32,009 up to this field): split the work across routines"
    )


def test_cel_syntax_error_points_inside_the_expression() -> None:
    found = problems(f"""
        name: x
        inputs: {{x: {{type: string}}}}
        steps:
          - id: a
            uses: {ECHO}
            with:
              text: hello ${{{{ inputs.x 1 }}}}
        """)
    # `      text: hello ${{ inputs.x 1 }}`: the 1 is at column 32 of line 7
    assert found == ["7:32: step 'a': with: ${{ inputs.x 1 }}: syntax error at column 10: unexpected '1'"]


def test_unclosed_expression_is_reported_at_its_opening() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            with:
              text: hi ${{{{ inputs.x
        """)
        == "6:16: step 'a': with: '${{' is not closed by '}}'"
    )


def test_reading_a_later_step_or_itself_or_an_unknown_one_is_refused() -> None:
    found = problems(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            with:
              text: ${{{{ steps.b.output.text }}}}
          - id: b
            uses: {ECHO}
            if: steps.b.status == "failed"
            with:
              text: ${{{{ steps.nope.output.text }}}}
        """)
    assert found == [
        "6:17: step 'a': with: ${{ steps.b.output.text }}: steps.b runs later: a step reads only "
        "the steps before it",
        "9:9: step 'b': if: ${{ steps.b.status == \"failed\" }}: a step cannot read its own steps.b",
        "11:17: step 'b': with: ${{ steps.nope.output.text }}: no step 'nope' (steps: a, b)",
    ]


def test_reading_foreach_against_a_later_step_is_refused() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            foreach: ${{{{ steps.b.output }}}}
          - id: b
            uses: {ECHO}
        """)
        == "5:18: step 'a': foreach: ${{ steps.b.output }}: steps.b runs later: a step reads only the "
        "steps before it"
    )


def test_scope_problems_unknown_input_wrong_step_field_item_outside_foreach_unknown_name() -> None:
    found = problems(f"""
        name: x
        inputs:
          who: {{type: string}}
        steps:
          - id: a
            uses: {ECHO}
          - id: b
            uses: {ECHO}
            with:
              text: ${{{{ inputs.whom }}}}
              a: ${{{{ steps.a.outputs }}}}
              b: ${{{{ item }}}}
              c: ${{{{ input.who }}}}
        outputs:
          o: ${{{{ index }}}}
        """)
    assert found == [
        "10:17: step 'b': with: ${{ inputs.whom }}: no input 'whom' (inputs: who)",
        "11:14: step 'b': with: ${{ steps.a.outputs }}: steps.a.outputs: a step has output and status",
        "12:14: step 'b': with: ${{ item }}: 'item' exists only in with: of a step with foreach:",
        "13:14: step 'b': with: ${{ input.who }}: unknown name 'input' (in scope: inputs, steps)",
        "15:10: outputs: ${{ index }}: 'index' exists only in with: of a step with foreach:",
    ]


def test_item_and_index_are_in_scope_in_a_foreach_step() -> None:
    routine = load_routine(
        textwrap.dedent(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            foreach: [x, y]
            with: {{text: "${{{{ index }}}}: ${{{{ item }}}}"}}
        """)
    )
    assert routine.steps[0].foreach == ["x", "y"]


def test_if_with_text_around_the_expression_is_refused() -> None:
    assert (
        only(f"""
        name: x
        steps:
          - id: a
            uses: {ECHO}
            if: "run ${{{{ true }}}}"
        """)
        == "5:9: step 'a': if: must be one expression, bare or in ${{ }}, not text with expressions inside"
    )


def test_bad_input_schemas_and_defaults_are_refused() -> None:
    found = problems(f"""
        name: x
        inputs:
          count:
            type: integer
            default: three
          names:
            type: array
            minItems: -1
          bad-name:
            type: string
          kind:
            type: text
        steps:
          - id: a
            uses: {ECHO}
        """)
    assert found == [
        "5:14: inputs.count.default: 'three' is not of type 'integer'",
        "8:15: inputs.names: not a JSON Schema: -1 is less than the minimum of 0",
        "9:3: inputs.bad-name: input name 'bad-name' is not accepted: use letters, digits and _ "
        "(inputs.<name> must read it), such as my_input",
        "12:11: inputs.kind.type: input should be 'string', 'integer', 'number', 'boolean', "
        "'array' or 'object', "
        "got 'text'",
    ]


def test_all_problems_come_at_once_in_line_order() -> None:
    found = problems("""
        name: Bad_Name
        steps:
          - id: a
            uses: nope
            timeout: soon
          - id: a
            uses: com.example.tools/echo/echo@1
            with: {text: "${{ steps.zz.output }}"}
        """)
    assert [p.split(":")[0] for p in found] == ["1", "4", "5", "6", "8"]


class DictResolver:
    """A resolver over a dict of ref -> inputSchema (the registry seam; the real ones are tested apart)."""

    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        self.schemas = schemas
        self.asked: list[str] = []

    def input_schema(self, ref: str) -> dict[str, Any] | None:
        self.asked.append(ref)
        if ref not in self.schemas:
            raise ResolveError(f"pack {ref.rsplit('/', 1)[0]} is not in the registry")
        return self.schemas[ref]


ECHO_SCHEMA = {
    "type": "object",
    "required": ["text"],
    "additionalProperties": False,
    "properties": {
        "text": {"type": "string", "maxLength": 10},
        "file": {"type": "object", "x-b3os-file": {"accept": ["text/plain"]}},
    },
}


def test_with_values_are_checked_against_the_action_input_schema() -> None:
    resolver = DictResolver({ECHO: ECHO_SCHEMA})
    found = problems(
        f"""
        name: x
        inputs:
          n: {{type: integer, default: 1}}
        steps:
          - id: a
            uses: {ECHO}
            with:
              text: 42
              file: not a file
              colour: red
          - id: b
            uses: {ECHO}
            with:
              file: ${{{{ inputs.n }}}}
          - id: c
            uses: {ECHO}
            with:
              text: this text is too long
          - id: d
            uses: {ECHO}
            with:
              text: ${{{{ "a very long text made at run time" }}}}
        """,
        resolver,
    )
    assert found == [
        "8:13: step 'a': with.text: 42 is not of type 'string'",
        "9:13: step 'a': with.file: 'not a file' is not of type 'object'",
        "10:7: step 'a': with: com.example.tools/echo/echo@1 has no input 'colour' (inputs: text, file)",
        "13:5: step 'b': with: missing required input 'text' of com.example.tools/echo/echo@1",
        "18:13: step 'c': with.text: 'this text is too long' is too long",
    ]
    assert resolver.asked == [ECHO]  # one look-up per ref


def test_a_uses_that_does_not_resolve_is_reported_at_the_uses_line() -> None:
    assert (
        only(
            """
        name: x
        steps:
          - id: a
            uses: com.example.tools/gone/echo@1
        """,
            DictResolver({}),
        )
        == "4:11: step 'a': uses: cannot resolve com.example.tools/gone/echo@1: pack "
        "com.example.tools/gone is not in the registry"
    )


def test_resolve_inputs_fills_defaults_and_reports_every_problem() -> None:
    routine = load_routine(
        textwrap.dedent(f"""
        name: x
        inputs:
          who: {{type: string}}
          n: {{type: integer, default: 2, minimum: 1}}
          tags: {{type: array, items: {{type: string}}, default: []}}
        steps:
          - id: a
            uses: {ECHO}
        """)
    )
    assert resolve_inputs(routine, {"who": "ann"}) == {"who": "ann", "n": 2, "tags": []}
    with pytest.raises(RoutineInputError) as info:
        resolve_inputs(routine, {"n": 0, "tags": [1], "extra": True})
    assert info.value.problems == [
        "routine 'x' has no input 'extra' (inputs: who, n, tags)",
        "input 'who' is required",
        "input 'n': 0 is less than the minimum of 1",
        "input 'tags'[0]: 1 is not of type 'string'",
    ]


def test_a_yaml_alias_bomb_is_refused_at_the_first_alias_before_anything_expands() -> None:
    bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    assert only(bomb) == (
        "2:8: the alias *a is not accepted in a routine: write the value out "
        "(aliases can expand a small file without bound)"
    )


def test_values_nested_deeper_than_64_levels_are_refused_at_their_line() -> None:
    deep = "[" * 10_000 + "]" * 10_000
    found = only(f"name: x\nsteps:\n  - id: a\n    uses: {ECHO}\n    with:\n      text: {deep}\n")
    assert found == "6:73: values nested deeper than 64 levels are not accepted"  # the 65th level


def test_values_nested_deeper_than_64_levels_in_a_large_file_are_refused_at_their_line() -> None:
    deep = "[" * 40_000 + "]" * 40_000  # past the text that is read again by PyYAML for its sentences
    found = only(f"name: x\nsteps:\n  - id: a\n    uses: {ECHO}\n    with:\n      text: {deep}\n")
    assert found.startswith("6:") and "nest" in found, found


def test_a_syntax_error_after_40000_values_is_said_at_its_line() -> None:
    items = ", ".join(["1"] * 40_000)  # 120 KB: past the text read again by PyYAML
    step = f"  - id: a\n    uses: {ECHO}\n    foreach: [{items}]\n    with: {{text: x}}\n"
    found = only(f"name: x\nsteps:\n{step}  a: b\n")  # a key where the list wants its next `-`
    assert found.startswith("7:3: YAML syntax error:") and "'-'" in found, found


@pytest.mark.parametrize(
    ("literal", "sentence"),
    [
        ("9" * 5000, "6:13: the integer 999999999999999999999999... is too large"),
        (str(2**53), f"6:13: the integer {2**53} is beyond {2**53 - 1}, the largest JSON carries exactly"),
    ],
)
def test_integers_beyond_what_json_carries_exactly_are_refused_at_their_line(
    literal: str, sentence: str
) -> None:
    assert (
        only(f"name: x\nsteps:\n  - id: a\n    uses: {ECHO}\n    with:\n      text: {literal}\n") == sentence
    )


STEP = (
    "name: x\ninputs:\n  s: {type: string}\n  n: {type: integer, default: 1}\n"
    f"steps:\n  - id: a\n    uses: {ECHO}\n"
)


@pytest.mark.parametrize(
    ("extra", "sentence"),
    [
        (
            "    continue-on-error: 'yes'\n",
            "8:24: step 'a': continue-on-error: input should be a valid boolean, got 'yes'",
        ),
        (
            "    retry: {max-attempts: '1'}\n",
            "8:27: step 'a': retry.max-attempts: input should be a valid integer, got '1'",
        ),
        (
            "    timeout: 0s\n",
            "8:14: step 'a': timeout: timeout 0s must be longer than 0 (leave it out for the action's limit)",
        ),
        (
            "    timeout: 1ms\n",
            "8:14: step 'a': timeout: timeout 1ms is shorter than a call can take (1s at least; "
            "leave it out for the action's limit)",
        ),
        (
            "    retry: {backoff: 10s, max-backoff: 1s}\n",
            "8:12: step 'a': retry: backoff 10s is longer than max-backoff 1s: "
            "the first delay cannot exceed the longest one",
        ),
        (
            "    foreach: ${{ inputs.s }}\n",
            "8:14: step 'a': foreach: inputs.s is a string input: foreach needs a list",
        ),
        (
            "    with: {text: '${{ foo(1) }}'}\n",
            "8:23: step 'a': with: ${{ foo(1) }}: there is no function foo() in CEL",
        ),
    ],
)
def test_the_validator_refuses_what_would_fail_or_be_silently_coerced(extra: str, sentence: str) -> None:
    assert only(STEP + extra) == sentence


@pytest.mark.parametrize(("uses", "shown"), [("5", "5"), ("", "None"), ("[a]", "['a']")])
def test_a_uses_that_is_not_text_is_refused_at_its_line(uses: str, shown: str) -> None:
    found = only(STEP.replace(f"uses: {ECHO}", f"uses: {uses}"))
    assert found.endswith(f"step 'a': uses: must be an action ref such as {ECHO}, got {shown}")


def test_a_default_with_an_expression_is_refused_it_is_a_literal() -> None:
    text = STEP.replace("n: {type: integer, default: 1}", "n: {type: integer, default: '${{ 1 }}'}")
    assert only(text) == "4:31: inputs.n.default: a default is a literal value: ${{ }} is not evaluated there"


def test_an_input_pattern_that_cannot_run_in_linear_time_is_refused_and_redos_patterns_are_fast() -> None:
    text = (
        "name: x\ninputs:\n  s: {type: string, pattern: '(a)\\1'}\nsteps:\n  - id: a\n    uses: a.b/c/d@1\n"
    )
    assert only(text) == (
        "3:30: inputs.s: the pattern '(a)\\\\1' uses a feature that cannot be matched in linear time "
        "(RE2 refuses it)"
    )
    routine = load_routine(
        "name: x\ninputs:\n  s: {type: string, pattern: '^(a+)+$'}\nsteps:\n  - id: a\n    uses: a.b/c/d@1\n"
    )
    with pytest.raises(RoutineInputError) as err:  # catastrophic backtracking in Python's re: not here
        resolve_inputs(routine, {"s": "a" * 5000 + "!"})
    assert "does not match '^(a+)+$'" in str(err.value)


def test_schedules_with_a_bad_cron_timezone_or_inputs_are_named_with_their_line() -> None:
    found = problems(f"""
        name: x
        inputs:
          who: {{type: string}}
        on:
          schedule:
            - cron: "0 7 * *"
              inputs: {{who: ann}}
            - cron: "0 7 * * MON-FRY"
              timezone: Europe/Nowhere
              inputs: {{who: 5}}
            - cron: "*/15 8-18 * JAN,FEB 1-5"
              timezone: Europe/Paris
              inputs: {{who: bo}}
              overlap: allow_all
        steps:
          - id: a
            uses: {ECHO}
            with: {{text: hi}}
        """)
    assert found == [
        "6:13: on.schedule[0].cron '0 7 * *' has 4 field(s); it needs 5: minute hour day-of-month month "
        "day-of-week, such as '0 7 * * 1-5'",
        "8:13: on.schedule[1].cron '0 7 * * MON-FRY': the day of week field 'MON-FRY' names 'FRY', which is "
        "not a number nor one of SUN, MON, TUE, WED, THU, FRI, SAT",
        "9:17: on.schedule[1].timezone 'Europe/Nowhere' is not an IANA timezone name such as 'Europe/Paris' "
        "or 'UTC'",
        "10:15: on.schedule[1].inputs: input 'who': 5 is not of type 'string'",
    ]
    overlap = problems(f"""
        name: x
        on:
          schedule:
            - cron: "0 7 * * *"
              overlap: never
        steps:
          - id: a
            uses: {ECHO}
            with: {{text: hi}}
        """)
    assert overlap == [
        "5:16: on.schedule.0.overlap: input should be 'skip', 'buffer_one' or 'allow_all', got 'never'"
    ]


def test_a_routine_of_more_than_50000_values_is_refused_at_the_first_past_the_bound() -> None:
    # counted on libyaml's events before any value is made: a million items cost no more than 60,000
    for items in (60_000, 1_000_000):
        listed = ",".join(["1"] * items)
        found = only(
            f"name: x\nsteps:\n  - id: a\n    uses: {ECHO}\n    foreach: [{listed}]\n    with: {{}}\n"
        )
        # the 50,001st value is the 49,989th item: 12 come before it (keys, values, the list itself)
        assert found == (
            f"5:{15 + 49_988 * 2}: a routine holds at most 50,000 values (keys, texts, numbers, lists and "
            "maps); this one holds more"
        ), found
    assert yaml_positions.MAX_VALUES == 50_000


def test_a_literal_foreach_of_more_than_10000_items_is_refused_at_its_line() -> None:
    listed = ",".join(["1"] * 10_001)
    found = only(f"name: x\nsteps:\n  - id: a\n    uses: {ECHO}\n    foreach: [{listed}]\n    with: {{}}\n")
    assert found.startswith("5:14: step 'a': foreach: lists 10,001 items; a step runs at most 10,000"), found


def test_an_input_schema_whose_reference_leaves_it_or_never_ends_is_refused_at_its_line() -> None:
    found = problems("""
        name: x
        inputs:
          remote:
            type: object
            properties:
              a: {$ref: 'http://127.0.0.1:9/s.json'}
          loop: {$ref: '#', default: 1}
          gone: {type: object, properties: {a: {$ref: '#/$defs/nope'}}}
        steps:
          - id: a
            uses: a.b/c/d@1
        """)
    assert found == [
        "6:17: inputs.remote: the $ref 'http://127.0.0.1:9/s.json' is outside this schema: only references "
        "within it (#/...) are followed, nothing is fetched",
        "7:16: inputs.loop: the $ref '#' comes back to itself without reading into the value: checking a "
        "value against it would never end",
        "8:47: inputs.gone: the $ref '#/$defs/nope' names nothing in this schema",
    ]


def test_numbers_json_cannot_write_and_an_empty_enum_are_refused_at_their_line() -> None:
    found = problems("""
        name: x
        inputs:
          n: {type: number, default: .nan}
          pick: {type: string, enum: []}
        steps:
          - id: a
            uses: a.b/c/d@1
            with: {v: .inf}
            retry: {backoff-coefficient: '2'}
        outputs:
          o: -.inf
        """)
    no_number = "JSON has no such number (.nan, .inf and -.inf): write a finite number, or null"
    assert found == [
        f"3:30: inputs.n.default: {no_number}",
        "4:30: inputs.pick: enum lists no value, so no value could ever match: list at least one",
        f"8:15: step 'a': with.v: {no_number}",
        "9:34: step 'a': retry.backoff-coefficient: input should be a valid number, got '2'",
        f"11:6: outputs.o: {no_number}",
    ]
