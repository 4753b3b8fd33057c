"""No JSON body gets a 500: what api/jsonbody.py refuses, over real HTTP to a real api process.

Lone surrogates, integers beyond +-(2^53 - 1), numbers with 5,000 digits and nesting deeper than 64
levels are each answered `400 invalid_request` naming the field, on every route that takes a JSON body
(the ones `/openapi.json` lists, and `POST /v1/mcp`), with or without an Idempotency-Key; what is
within the limits still goes through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import loopback
import pytest
from liveapi import ECHO_REF, LiveApi, start_live_api
from temporalio.testing import WorkflowEnvironment

NUMBERS = """
name: numbers
inputs:
  n: {type: integer, default: 1}
  data: {type: object, default: {}}
steps:
  - id: say
    uses: com.example.tools/echo/echo@1
    with:
      text: n is ${{ inputs.n }}
"""
MCP_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {}}}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, temporal_env: WorkflowEnvironment) -> Iterator[LiveApi]:
    root = tmp_path_factory.mktemp("json-limits")
    api = start_live_api(root, temporal_address=temporal_env.client.service_client.config.target_host)
    try:
        with loopback.client(base_url=api.url, timeout=30) as http:
            r = http.post("/v1/routines", headers=api.owner.headers, json={"yaml": NUMBERS})
            assert r.status_code == 201, r.text
        yield api
    finally:
        api.stop()


@pytest.fixture
def http(live: LiveApi) -> Iterator[httpx.Client]:
    with loopback.client(base_url=live.url, timeout=60, headers=live.owner.headers) as client:
        yield client


def post(http: httpx.Client, path: str, raw: str | bytes, **headers: str) -> httpx.Response:
    """POST raw JSON text (json.dumps writes a lone surrogate as its escape, `\\udaac`)."""
    return http.post(path, content=raw, headers={"Content-Type": "application/json", **headers})


def refused(r: httpx.Response, field: str) -> str:
    """Assert a 400 invalid_request naming `field`; its sentence."""
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field), error
    message: str = error["message"]
    return message


# Each route that takes a JSON body, and a body of it with `{value}` in one place and that place's name.
BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "/v1/actions/call": ({"ref": ECHO_REF, "input": {"text": "{value}"}}, "input.text"),
    "/v1/mcp": (
        {**MCP_CALL, "params": {"name": "x", "arguments": {"text": "{value}"}}},
        "params.arguments.text",
    ),
    "/v1/routines": ({"yaml": "{value}"}, "yaml"),
    "/v1/routines/numbers/runs": ({"inputs": {"data": {"list": ["a", "{value}"]}}}, "inputs.data.list.1"),
    "/v1/connections": (
        {"pack": "com.example.tools/echo", "connection": "token", "secret": "{value}"},
        "secret",
    ),
    "/v1/keys": ({"name": "{value}", "scopes": ["actions:call"]}, "name"),
    "/v1/actions/call/cancel": ({"idempotency_key": "{value}"}, "idempotency_key"),
}


def body_with(path: str, literal: str) -> str:
    """The route's body, as JSON text, with `literal` (JSON text itself) in its marked place."""
    body, _ = BODIES[path]
    return json.dumps(body).replace('"{value}"', literal)


@pytest.mark.parametrize("path", list(BODIES))
def test_a_lone_surrogate_is_refused_naming_its_field(http: httpx.Client, path: str) -> None:
    message = refused(post(http, path, body_with(path, '"a\\udaacb"')), BODIES[path][1])
    assert message == (
        f"The field {BODIES[path][1]} holds text that is not valid Unicode (a lone surrogate such as "
        "\\udaac); send text that UTF-8 can carry."
    )


def test_a_surrogate_in_a_member_name_or_in_raw_bytes_is_refused(http: httpx.Client) -> None:
    message = refused(
        post(http, "/v1/actions/call", '{"ref": "x", "input": {"a\\ud800": 1}}'), "input.a\\ud800"
    )
    assert message.startswith("A member name at input.a\\ud800 is not valid Unicode")
    raw = b'{"ref": "x", "input": {"text": "\xed\xa0\x80"}}'  # a surrogate encoded as UTF-8 bytes
    refused(post(http, "/v1/actions/call", raw), "input.text")


@pytest.mark.parametrize("n", [2**53, -(2**53), 10**30])
@pytest.mark.parametrize("path", ["/v1/actions/call", "/v1/routines/numbers/runs"])
def test_an_integer_beyond_2_53_is_refused_with_an_idempotency_key(
    http: httpx.Client, path: str, n: int
) -> None:
    body = {"ref": ECHO_REF, "input": {"text": "hi", "n": n}} if "call" in path else {"inputs": {"n": n}}
    field = "input.n" if "call" in path else "inputs.n"
    r = post(http, path, json.dumps(body), **{"Idempotency-Key": f"big-{n}"})
    message = refused(r, field)
    assert message == (
        f"The field {field} holds an integer outside +-9007199254740991 (2^53 - 1), the range a JSON number "
        "keeps exactly (RFC 7493); send a larger one as a string."
    )
    refused(post(http, path, json.dumps(body)), field)  # the same without a key: one rule for every body


def test_the_largest_integer_a_json_number_holds_starts_a_run(http: httpx.Client) -> None:
    n = 2**53 - 1
    r = post(
        http, "/v1/routines/numbers/runs", json.dumps({"inputs": {"n": n}}), **{"Idempotency-Key": "max"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["inputs"] == {"n": n, "data": {}}
    again = post(
        http, "/v1/routines/numbers/runs", json.dumps({"inputs": {"n": n}}), **{"Idempotency-Key": "max"}
    )
    assert (again.status_code, again.json()["run_id"]) == (200, r.json()["run_id"])


@pytest.mark.parametrize("literal", ["9" * 5000, "-" + "1" * 5000, "1e400", "NaN", "-Infinity"])
def test_a_number_json_cannot_carry_is_refused(http: httpx.Client, literal: str) -> None:
    message = refused(post(http, "/v1/actions/call", body_with("/v1/actions/call", literal)), "input.text")
    assert message.startswith("The field input.text holds ")


def json_body_routes(live: LiveApi) -> list[tuple[str, str]]:
    """(method, path) of every operation of /openapi.json that takes a JSON body, and POST /v1/mcp."""
    document = loopback.get(f"{live.url}/openapi.json").json()
    routes = [("POST", "/v1/mcp")]
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                path = template.replace("{namespace}", "com.example.tools").replace("{name}", "numbers")
                routes.append((method.upper(), path))
    return routes


def test_nesting_deeper_than_64_levels_is_refused_on_every_json_route(
    live: LiveApi, http: httpx.Client
) -> None:
    routes = json_body_routes(live)
    assert len(routes) >= 10, routes
    deep = "[" * 100_000 + "]" * 100_000
    for method, path in routes:
        r = http.request(method, path, content=deep, headers={"Content-Type": "application/json"})
        message = refused(r, "body")
        assert message == "The request body nests arrays and objects deeper than 64 levels.", (method, path)
        nested = '{"a": ' + "[" * 64 + "]" * 64 + "}"  # 65 levels: the object and 64 arrays
        r = http.request(method, path, content=nested, headers={"Content-Type": "application/json"})
        message = refused(r, "a" + ".0" * 63)
        assert message.startswith(
            "The request body nests arrays and objects deeper than 64 levels (at a.0.0."
        )


def test_64_levels_pass_to_the_route(http: httpx.Client) -> None:
    def run_with(arrays: int) -> httpx.Response:  # {"inputs": {"data": {"x": [[...]]}}}: 3 objects and arrays
        return post(
            http,
            "/v1/routines/numbers/runs",
            '{"inputs": {"data": {"x": %s}}}' % ("[" * arrays + "]" * arrays),
        )

    assert run_with(61).status_code == 201
    refused(run_with(62), "inputs.data.x" + ".0" * 61)


def test_a_body_that_is_not_json_is_answered_by_its_route(http: httpx.Client) -> None:
    message = refused(post(http, "/v1/actions/call", "{nope"), "body")
    assert message.startswith("The request body is not valid JSON (")
    refused(post(http, "/v1/keys", "{nope"), "body")
