"""`${{ }}` expressions: typing, interpolation, scopes, errors, references."""

from __future__ import annotations

from typing import Any

import pytest

from engine import cel_compile
from engine import expressions as ex

CONTEXT: dict[str, Any] = {
    "inputs": {"name": "Ann", "names": ["ada", "bob"], "count": 3, "ratio": 0.5, "flag": True, "none": None},
    "steps": {
        "greet": {
            "status": "succeeded",
            "output": {"text": "hello Ann", "file": {"$bytes": "aGk=", "name": "a.txt"}},
        },
        "broken": {"status": "failed", "output": None},
    },
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${{ inputs.names }}", ["ada", "bob"]),
        ("${{ inputs.count }}", 3),
        ("${{ inputs.count * 2 }}", 6),
        ("${{ inputs.ratio }}", 0.5),
        ("${{ inputs.flag }}", True),
        ("${{ inputs.none }}", None),
        ("  ${{ inputs.count }}  ", 3),
        ("${{ steps.greet.output.file }}", {"$bytes": "aGk=", "name": "a.txt"}),
        ('${{ {"a": {"b": [1, 2]}} }}', {"a": {"b": [1, 2]}}),
        ("${{ inputs.names.map(n, n + '!') }}", ["ada!", "bob!"]),
        ("${{ size(inputs.names) }}", 2),
    ],
)
def test_whole_value_expression_keeps_its_type(value: str, expected: Any) -> None:
    result = ex.evaluate(value, CONTEXT)
    assert result == expected
    assert type(result) is type(expected)


def test_results_are_plain_python_types_all_the_way_down() -> None:
    result = ex.evaluate('${{ {"n": inputs.count, "l": [inputs.flag, inputs.ratio, "x"]} }}', CONTEXT)
    assert type(result) is dict
    assert [type(k) for k in result] == [str, str]
    assert type(result["n"]) is int
    assert [type(v) for v in result["l"]] == [bool, float, str]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hello ${{ inputs.name }}!", "hello Ann!"),
        ("n=${{ inputs.count }}", "n=3"),
        ("${{ inputs.count }} items", "3 items"),
        ("list ${{ inputs.names }}", 'list ["ada","bob"]'),
        ("${{ inputs.flag }}/${{ inputs.none }}", "true/null"),
        ("${{ inputs.ratio }}x", "0.5x"),
        ("no expressions", "no expressions"),
        ('${{ "}}" }} closes', "}} closes"),
    ],
)
def test_interpolated_expression_becomes_text(value: str, expected: str) -> None:
    assert ex.evaluate(value, CONTEXT) == expected


def test_evaluate_walks_dicts_and_lists_and_leaves_other_values_alone() -> None:
    value = {"a": ["${{ inputs.count }}", 7, None, {"b": "x ${{ inputs.name }}"}], "c": False}
    assert ex.evaluate(value, CONTEXT) == {"a": [3, 7, None, {"b": "x Ann"}], "c": False}


def test_foreach_scope_reads_item_and_index() -> None:
    items = ex.evaluate_foreach("${{ inputs.names }}", CONTEXT)
    results = [
        ex.evaluate(
            {"text": "${{ index }}: ${{ item }}", "n": "${{ index }}"}, {**CONTEXT, "item": it, "index": i}
        )
        for i, it in enumerate(items)
    ]
    assert results == [{"text": "0: ada", "n": 0}, {"text": "1: bob", "n": 1}]


def test_foreach_takes_a_literal_list_with_expressions_inside() -> None:
    assert ex.evaluate_foreach(["a", "${{ inputs.name }}"], CONTEXT) == ["a", "Ann"]


def test_a_foreach_over_more_items_than_a_step_takes_says_how_many() -> None:
    context = {**CONTEXT, "inputs": {"l": list(range(10_000))}}
    too_many = r"foreach gives 10,000 items; a step runs at most 1,000"
    with pytest.raises(ex.TooManyItems, match=too_many) as err:
        ex.evaluate_foreach("${{ inputs.l }}", context, most=1_000)
    assert err.value.count == 10_000
    with pytest.raises(ex.TooManyItems, match=r"foreach gives 3 items; a step runs at most 2"):
        ex.evaluate_foreach(["a", "b", "${{ inputs.name }}"], CONTEXT, most=2)
    assert ex.evaluate_foreach("${{ inputs.l }}", context, most=10_000)[-1] == 9_999


def test_foreach_of_something_else_than_a_list_is_an_error() -> None:
    with pytest.raises(ex.ExpressionError, match=r"foreach: must give a list, got 3"):
        ex.evaluate_foreach("inputs.count", CONTEXT)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (None, True),
        (True, True),
        (False, False),
        ('steps.greet.status == "succeeded"', True),
        ("${{ steps.broken.status == 'succeeded' }}", False),
        ("inputs.count > 2 && inputs.flag", True),
    ],
)
def test_condition_accepts_bare_and_wrapped_expressions(condition: str | bool | None, expected: bool) -> None:
    assert ex.evaluate_condition(condition, CONTEXT) is expected


def test_condition_that_is_not_boolean_is_an_error() -> None:
    with pytest.raises(ex.ExpressionError, match=r"if: must give true or false, got Ann"):
        ex.evaluate_condition("inputs.name", CONTEXT)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("${{ inputs.missing }}", "${{ inputs.missing }}: no such key: 'missing'"),
        ("${{ nope + 1 }}", "${{ nope + 1 }}: undeclared reference to 'nope'"),
        ('x ${{ inputs.count + "a" }}', "no operator or function fits these operand types (int, string)"),
        ("${{ inputs.names[5] }}", "${{ inputs.names[5] }}: list index out of range"),
        ("${{ 1 / 0 }}", "${{ 1 / 0 }}: modulus or divide by zero"),
        ('${{ b"abc" }}', "the result is bytes"),
        ("${{ steps.broken.output.text }}", "${{ steps.broken.output.text }}"),
    ],
)
def test_evaluation_error_names_the_expression_and_the_problem(value: str, problem: str) -> None:
    with pytest.raises(ex.ExpressionError) as info:
        ex.evaluate({"field": value}, CONTEXT)
    assert problem in str(info.value)
    assert "Traceback" not in str(info.value) and "Activation" not in str(info.value)


@pytest.mark.parametrize(
    ("expr", "line", "column", "problem"),
    [
        ("inputs.a +", 1, 11, "the expression ends too early"),
        ("inputs.a 1", 1, 10, "unexpected '1'"),
        ("(inputs.a", 1, 10, "the expression ends too early"),
        ("x = 1", 1, 3, "unexpected '='"),
        ("a &&\n  || b", 2, 3, "unexpected '||'"),
    ],
)
def test_syntax_error_has_line_and_column(expr: str, line: int, column: int, problem: str) -> None:
    with pytest.raises(ex.ExpressionSyntaxError) as info:
        ex.check(expr)
    assert (info.value.line, info.value.column) == (line, column)
    assert problem in info.value.problem


def test_unclosed_template_is_a_syntax_error() -> None:
    with pytest.raises(ex.ExpressionSyntaxError, match=r"'\$\{\{' is not closed by '\}\}'"):
        ex.evaluate("hello ${{ inputs.name", CONTEXT)


def test_empty_expression_is_a_syntax_error() -> None:
    with pytest.raises(ex.ExpressionSyntaxError, match="the expression is empty"):
        ex.check_template("a ${{  }} b")


@pytest.mark.parametrize(
    ("expr", "steps"),
    [
        ("steps.a.output.text", {"a"}),
        ('steps["b-c"].status == "failed"', {"b-c"}),
        ("has(steps.a.output.x) ? steps.b.output.x : steps.c.output.y.startsWith('z')", {"a", "b", "c"}),
        ("inputs.names.map(steps, steps)", set()),
        ("inputs.names.exists(s, s == steps.d.output.text)", {"d"}),
        ("inputs.count + 1", set()),
    ],
)
def test_referenced_steps_finds_every_step_read(expr: str, steps: set[str]) -> None:
    assert ex.referenced_steps(expr) == steps


def test_references_leave_out_macro_variables() -> None:
    refs = ex.references("inputs.names.filter(n, n != item).map(m, m + string(index))")
    assert {r.root for r in refs} == {"inputs", "item", "index"}


def test_compiled_programs_are_cached_by_text() -> None:
    ex.check("inputs.count + 41")
    first = cel_compile._programs["inputs.count + 41"]
    ex.evaluate("${{ inputs.count + 41 }}", CONTEXT)
    assert cel_compile._programs["inputs.count + 41"] is first


def test_evaluation_is_deterministic_for_maps() -> None:
    expr = '${{ {"z": 1, "a": 2, "m": inputs.names} }}'
    runs = {repr(ex.evaluate(expr, CONTEXT)) for _ in range(5)}
    assert runs == {"{'z': 1, 'a': 2, 'm': ['ada', 'bob']}"}


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("string(null)", "string(null_type): no such overload"),
        ("size(inputs.none)", "size(null_type): no such overload"),
        ("int(true)", "int(bool): no such overload"),
        ("string(inputs.names)", "string(list): no such overload"),
        ("[1, 2, 3][-1]", "list index out of range: -1 (the list has 3 items)"),
        ("inputs.names[2]", "list index out of range: 2 (the list has 2 items)"),
        ("inputs.name[0]", "_[_](string, int): no such overload"),
        ("inputs.none.x", "cannot read .x of a value of type null_type: only a map has fields"),
        ("inputs.count.x", "cannot read .x of a value of type int: only a map has fields"),
        ("1 in inputs.none", "no operator or function fits these operand types (int, null_type)"),
        ("'\\ud800'", "the result holds text that is not Unicode"),
    ],
)
def test_results_follow_the_cel_definition_not_python(expr: str, problem: str) -> None:
    with pytest.raises(ex.ExpressionError) as info:
        ex.evaluate_expression(expr, CONTEXT)
    assert problem in info.value.problem
    assert "class" not in info.value.problem and "NoneType" not in info.value.problem


def test_conversions_give_cel_text() -> None:
    assert ex.evaluate("${{ [string(true), string(3), string(1u), string(b'ab')] }}", CONTEXT) == [
        "true",
        "3",
        "1",
        "ab",
    ]


@pytest.mark.parametrize(
    ("expr", "offset", "problem"),
    [
        ("1" + " + 1" * 700, 2000, "has 2,801 characters, more than the 2,000 one expression may have"),
        ("+".join(["1"] * 34), 0, "nests more than 32 levels"),
        ("(" * 33 + "1" + ")" * 33, 32, "nests more than 32 levels"),
        ("l.map(a, l.map(b, l.map(c, l.map(d, d))))", 27, "nests more than 3 macros"),
        ("T{a: 1}", 0, "message construction"),
    ],
)
def test_expressions_over_the_caps_are_refused_where_they_go_over(
    expr: str, offset: int, problem: str
) -> None:
    with pytest.raises(ex.ExpressionSyntaxError) as info:
        ex.check(expr)
    assert problem in info.value.problem
    assert info.value.offset == offset
    assert len(str(info.value)) < 300  # the expression is shown cut


def test_an_expression_at_the_caps_still_evaluates() -> None:
    assert ex.evaluate_expression("+".join(["1"] * 33), CONTEXT) == 33
    assert ex.evaluate_expression("(" * 31 + "[1]" + ")" * 31, CONTEXT) == [1]
    deep = "inputs.names" + ".map(a, [a]" * 3 + ")" * 3
    assert ex.evaluate_expression(deep, CONTEXT) == [[[["ada"]]], [[["bob"]]]]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("${{ inputs.l.map(x, inputs.l.map(y, x * y)) }}", "took more than 5,000 evaluation steps"),
        ("${{ inputs.l.map(x, x) }} ${{ inputs.l.map(x, x) }} ${{ inputs.l.map(x, x) }}", "evaluation steps"),
        ("${{ size(inputs.big) }}", "read more than 50,000 values"),
        ("${{ inputs.l.map(x, inputs.text + inputs.text) }}", "built more than 4,194,304 characters"),
        ("${{ inputs.text }}${{ inputs.text }}${{ inputs.text }}", "longer than 1,048,576 characters"),
    ],
)
def test_one_fields_expressions_are_bounded_together(value: str, problem: str) -> None:
    context = {"inputs": {"l": list(range(3000)), "big": [0] * 50_001, "text": "x" * 400_000}}
    with pytest.raises(ex.ExpressionError) as info:
        ex.evaluate({"a": value}, context)
    assert problem in info.value.problem


def test_a_scope_reads_steps_set_after_it_was_made_and_shares_them_with_its_items() -> None:
    scope = ex.Scope({"inputs": {"n": 2}, "steps": {}})
    assert ex.evaluate("${{ inputs.n }}", scope) == 2
    scope.set_member("steps", "a", {"output": {"text": "hi"}, "status": "succeeded"})
    item = scope.with_names({"item": "x", "index": 0})
    assert ex.evaluate("${{ steps.a.output.text + item + string(index) }}", item) == "hix0"
    assert ex.evaluate("${{ has(steps.a) && !has(steps.b) }}", scope) is True


def test_the_cache_of_compiled_expressions_is_bounded_by_the_characters_it_holds() -> None:
    for i in range(1000, 3000):
        ex.check(f"inputs.count + {i}")  # 19 characters each
    assert cel_compile._programs.currsize <= ex.CACHE_CHARACTERS
    assert len(cel_compile._programs) == ex.CACHE_CHARACTERS // 19
    assert "inputs.count + 1000" not in cel_compile._programs  # the least recently used went first
    long = "[" + ",".join(str(n) for n in range(1000, 1399)) + "]"  # 1,996 characters: weighs 1,996
    ex.check(long)
    assert long in cel_compile._programs and cel_compile._programs.currsize <= ex.CACHE_CHARACTERS
    assert len(cel_compile._programs) == (ex.CACHE_CHARACTERS - len(long)) // 19 + 1


def test_matches_is_bounded_by_its_patterns_program_times_its_texts_length() -> None:
    scope = ex.Scope({"inputs": {"text": "ab " * 3_400, "mail": "ann@example.com"}, "steps": {}})
    assert ex.evaluate("${{ inputs.mail.matches('^[a-z]+@[a-z]+[.]com$') }}", scope) is True
    assert ex.evaluate("${{ matches(inputs.mail, 'zed') }}", scope) is False
    assert ex.evaluate("${{ inputs.text.matches('ab ab') }}", scope) is True  # 10 KB, a small program
    with pytest.raises(ex.ExpressionError) as slow:  # ~11,000 instructions over 10 KB: refused untried
        ex.evaluate(r"${{ inputs.text.matches('\\b(\\w+\\s?){1,1000}y') }}", scope)
    assert (
        "matches(): a pattern of 11,005 instructions over 10,200 characters is more work than one match "
        in str(slow.value)
    )
    with pytest.raises(ex.ExpressionError, match=r"matches\(\): the pattern cannot be used: missing \)"):
        ex.evaluate("${{ inputs.mail.matches('(a') }}", scope)
    with pytest.raises(ex.ExpressionError, match=r"matches\(string, int\): no such overload"):
        ex.evaluate("${{ matches(inputs.mail, 1) }}", scope)


def test_a_result_integer_beyond_2_53_has_no_json_form_and_says_how_to_carry_it() -> None:
    assert ex.evaluate("${{ 9007199254740991 }}", CONTEXT) == 9007199254740991
    assert ex.evaluate("${{ string(9007199254740991 + 2) }}", CONTEXT) == "9007199254740993"
    for expr in (
        "${{ 9007199254740991 + 1 }}",
        "${{ [1, -9007199254740992] }}",
        "${{ {'a': 2 * 9007199254740991} }}",
    ):
        with pytest.raises(ex.ExpressionError, match="is beyond the integers JSON carries exactly"):
            ex.evaluate(expr, CONTEXT)
