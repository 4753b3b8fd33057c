"""The HTTP runtime's templates: what an input can and cannot do to the URL, headers and body, and how a
response becomes the output or the pack's error."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from api.calls.errors import ActionFailed, CallInvalid
from api.calls.http_template import read_response, render_request, response_scope
from packs.manifest import HttpRequest, HttpResponse

EGRESS = ["api.example.com", "*.example.org"]


def render(url: str, **fields: Any) -> Any:
    inputs = fields.pop("input", {})
    request = HttpRequest.model_validate({"method": fields.pop("method", "GET"), "url": url, **fields})
    return render_request(request, {"input": inputs, "connections": {}}, EGRESS)


@pytest.mark.parametrize(
    "value",
    ["a/b", "a?b=1", "a#frag", "100%", "x/../y", "ünïcødé ☃", "a&b=c", "..a", "a b", "%2e%2E", "..%2F"],
)
def test_text_spliced_into_the_path_stays_one_segment_whatever_it_holds(value: str) -> None:
    rendered = render("https://api.example.com/v1/items/${{ input.id }}/detail", input={"id": value})
    parts = urlsplit(rendered.url)
    assert parts.query == "" and parts.fragment == ""
    segments = parts.path.split("/")
    assert segments[:3] == ["", "v1", "items"] and segments[4:] == ["detail"]
    assert unquote(segments[3]) == value


@pytest.mark.parametrize("value", ["..", "."])
def test_an_input_that_would_make_a_dot_segment_is_refused(value: str) -> None:
    with pytest.raises(CallInvalid) as err:
        render("https://api.example.com/v1/${{ input.id }}/x", input={"id": value})
    assert "'.' or '..'" in err.value.message


def test_query_values_are_encoded_null_leaves_a_parameter_out_and_a_list_repeats_it() -> None:
    rendered = render(
        "https://api.example.com/search?fixed=1",
        query={"q": "${{ input.q }}", "none": "${{ input.none }}", "tag": "${{ input.tags }}", "n": 5},
        input={"q": "a&b=c #x", "none": None, "tags": ["x", "y"]},
    )
    assert rendered.url == "https://api.example.com/search?fixed=1&q=a%26b%3Dc%20%23x&tag=x&tag=y&n=5"


def test_a_header_value_with_a_line_break_is_refused() -> None:
    with pytest.raises(CallInvalid) as err:
        render("https://api.example.com/", headers={"X-Name": "${{ input.n }}"}, input={"n": "a\r\nEvil: 1"})
    assert "header X-Name" in err.value.message


def test_a_body_keeps_the_types_of_whole_expressions_and_is_sent_as_json() -> None:
    rendered = render(
        "https://api.example.com/items",
        method="POST",
        body={"title": "${{ input.t }}", "n": "${{ input.n }}", "text": "n=${{ input.n }}"},
        input={"t": "hi", "n": 3},
    )
    assert rendered.body == b'{"title":"hi","n":3,"text":"n=3"}'
    assert ("Content-Type", "application/json") in rendered.headers


@pytest.mark.parametrize("url", ["https://evil.example.net/x", "http://api.example.com/x"])
def test_a_url_that_is_not_https_to_an_egress_host_is_refused_before_anything_is_sent(url: str) -> None:
    with pytest.raises(ActionFailed) as err:
        render(url)
    assert err.value.reason == "egress_refused" and "nothing was sent" in err.value.message


def test_a_wildcard_egress_host_admits_its_subdomains() -> None:
    assert render("https://eu.example.org/x").host == "eu.example.org"


def test_a_template_that_fails_names_where() -> None:
    with pytest.raises(ActionFailed) as err:
        render("https://api.example.com/${{ input.missing }}")
    assert err.value.reason == "template" and "impl.request.url" in err.value.message


def read(rule: dict[str, Any], status: int, body: bytes, headers: list[list[str]] | None = None) -> Any:
    response = response_scope(status, headers or [["Content-Type", "application/json"]], body)
    return read_response(HttpResponse.model_validate(rule), {"input": {"id": 7}}, response)


def test_without_success_and_map_a_2xx_json_body_is_the_output() -> None:
    assert read({}, 200, b'{"a": 1}').output == {"a": 1}
    assert read({}, 404, b'{"a": 1}').ok is False


def test_a_non_json_body_without_a_map_is_not_json() -> None:
    with pytest.raises(ActionFailed) as err:
        read({}, 200, b"<html>")
    assert err.value.reason == "not_json"


def test_success_and_map_see_the_response_and_the_input() -> None:
    rule = {
        "success": "${{ response.status == 404 || response.status == 200 }}",
        "map": {
            "found": "${{ response.status == 200 }}",
            "id": "${{ input.id }}",
            "ct": "${{ response.headers['x-a'] }}",
        },
    }
    got = read(rule, 404, b"", [["X-A", "1"], ["x-a", "2"]])
    assert got.ok and got.output == {"found": False, "id": 7, "ct": "1, 2"}


def test_the_first_matching_errors_entry_names_the_pack_error() -> None:
    rule = {
        "errors": [
            {"when": "${{ response.status == 401 }}", "code": "bad_credentials"},
            {"when": "${{ response.body.missing }}", "code": "broken"},
            {"when": "${{ response.status == 404 }}", "code": "not_found", "message": "item ${{ input.id }}"},
            {"when": "${{ true }}", "code": "other", "retryable": True},
        ]
    }
    got = read(rule, 404, b'{"message": "Not Found"}')
    assert got.ok is False and got.pack_error == {"code": "not_found", "message": "item 7"}
    assert read(rule, 500, b"{}").retryable is True
