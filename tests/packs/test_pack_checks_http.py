# ruff: noqa: E501
"""Publish checks of declarative HTTP actions and connections (11, 24 to 32): each refusal's exact sentence."""

from __future__ import annotations

import json
from typing import Any

import pytest
from packfixtures import REPO, echo_manifest
from test_pack_checks import CASES as GENERAL_CASES
from test_pack_checks import DELETE, OM, mutate

from packs.checks import CHECKS, run_checks
from packs.manifest import parse_manifest

EXAMPLES = REPO / "examples" / "packs"
GH = json.loads((EXAMPLES / "github" / "b3pack.json").read_text())
GH["actions"] = GH["actions"][:2]  # its http actions: test_pack_js checks the js one
GH.pop("triggers")  # test_pack_triggers checks them
ECHO = echo_manifest()
KEY = {
    "key": "key",
    "kind": "api_key",
    "title": "API key",
    "hosts": ["api.github.com"],
    "inject": {"header": "X-Api-Key"},
}
QKEY = {**KEY, "inject": {"query": "api_key"}}


def keyed(conn: dict[str, Any], **more: Any) -> dict[str, Any]:
    """Changes that make `conn` the github pack's one connection, required by both actions."""
    return {
        "connections": [conn],
        "actions[0].connections": ["key"],
        "actions[1].connections": ["key"],
        **more,
    }


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


CASES: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = [
    (
        OM,
        {"actions[0].impl.request.url": "https://${{ input.host }}/v1/search"},
        [
            'check 11: actions[0].impl.request.url "https://${{ input.host }}/v1/search" is not accepted: a template may not choose the host: write the host itself, as in "https://api.example.com/items/${{ input.id }}"; templates go in the path and the query',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.url": "https://geocoding-api.open-meteo.com${{ input.path }}"},
        [
            'check 11: actions[0].impl.request.url "https://geocoding-api.open-meteo.com${{ input.path }}" is not accepted: a template may not choose the host: write the host itself, as in "https://api.example.com/items/${{ input.id }}"; templates go in the path and the query',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.url": "https://user:pw@geocoding-api.open-meteo.com/v1/search"},
        [
            'check 11: actions[0].impl.request.url "https://user:pw@geocoding-api.open-meteo.com/v1/search" is not accepted: use a URL without user info: credentials come from the pack\'s connections',
        ],
    ),
    (
        GH,
        {"connections[0].scopes": ["repo"]},
        [
            "check 24: connections[0].scopes is not accepted: a connection has only the fields key, kind, title, hosts, params, inject",
        ],
    ),
    (
        GH,
        {"connections[0].kind": "token"},
        [
            'check 24: connections[0].kind "token" is not accepted: use "api_key", "bearer", "basic" or "oauth2"',
        ],
    ),
    (
        GH,
        {"connections[0].kind": DELETE},
        [
            'check 24: connections[0].kind is missing: use "api_key", "bearer", "basic" or "oauth2"',
        ],
    ),
    (
        GH,
        {"connections[0].title": "GitHub\ntoken"},
        [
            'check 24: connections[0].title "GitHub\\ntoken" is not accepted: use a text of 1 to 100 characters on one line',
        ],
    ),
    (
        GH,
        {"connections[0].params": {"type": "object", "properties": {"org": {"type": "strin"}}}},
        [
            "check 24: connections[0].params.properties.org.type \"strin\" is not accepted: it is not valid JSON Schema (2020-12): 'strin' is not valid under any of the given schemas",
        ],
    ),
    (
        GH,
        {"connections[0].params": {"type": "array"}},
        [
            'check 24: connections[0].params.type "array" is not accepted: use "object" at the top of the schema',
        ],
    ),
    (
        GH,
        {"connections[0].params": "org"},
        [
            'check 24: connections[0].params "org" is not accepted: use a JSON Schema of type "object" of the non-secret values, or omit it',
        ],
    ),
    (
        GH,
        {"connections[0].hosts": []},
        [
            'check 25: connections[0].hosts [] is not accepted: use a non-empty list of host names within egress, such as ["api.example.com"]',
        ],
    ),
    (
        GH,
        {"connections[0].hosts": DELETE},
        [
            'check 25: connections[0].hosts is missing: use a non-empty list of host names within egress, such as ["api.example.com"]',
        ],
    ),
    (
        GH,
        {"connections[0].hosts": ["https://api.github.com"]},
        [
            'check 25: connections[0].hosts[0] "https://api.github.com" is not accepted: use a lowercase host name such as "api.example.com"',
        ],
    ),
    (
        GH,
        {"connections[0].hosts": ["uploads.github.com"]},
        [
            'check 25: connections[0].hosts[0] "uploads.github.com" is not accepted: it is not within egress: add {"host": "uploads.github.com"} to egress',
        ],
    ),
    (
        GH,
        {"connections[0].hosts": ["*.github.com"]},
        [
            'check 25: connections[0].hosts[0] "*.github.com" is not accepted: it is not within egress: add {"host": "*.github.com"} to egress',
        ],
    ),
    (
        GH,
        {"connections[0].inject": {"header": "X-Token"}},
        [
            'check 26: connections[0].inject {"header": "X-Token"} is not accepted: only an api_key connection has inject: bearer and oauth2 go as Authorization: Bearer, basic as Authorization: Basic',
        ],
    ),
    (
        GH,
        keyed(without(KEY, "inject")),
        [
            'check 26: connections[0].inject is missing: use {"header": "X-Api-Key"} or {"query": "api_key"}, where the egress proxy puts the key',
        ],
    ),
    (
        GH,
        keyed({**KEY, "inject": {"header": "X-Api-Key", "query": "k"}}),
        [
            'check 26: connections[0].inject {"header": "X-Api-Key", "query": "k"} is not accepted: use {"header": "X-Api-Key"} or {"query": "api_key"}, where the egress proxy puts the key',
        ],
    ),
    (
        GH,
        keyed({**KEY, "inject": {"header": "Authorization"}}),
        [
            'check 26: connections[0].inject.header "Authorization" is not accepted: the egress proxy does not set Authorization, Cookie, Host, Content-Length or a hop-by-hop header: use the API\'s own key header, such as "X-Api-Key"',
        ],
    ),
    (
        GH,
        keyed({**KEY, "inject": {"header": "cookie"}}),
        [
            'check 26: connections[0].inject.header "cookie" is not accepted: the egress proxy does not set Authorization, Cookie, Host, Content-Length or a hop-by-hop header: use the API\'s own key header, such as "X-Api-Key"',
        ],
    ),
    (
        GH,
        keyed({**KEY, "inject": {"header": "X Api Key"}}),
        [
            'check 26: connections[0].inject.header "X Api Key" is not accepted: use a header name such as "X-Api-Key"',
        ],
    ),
    (
        GH,
        keyed({**KEY, "inject": {"query": "api key"}}),
        [
            'check 26: connections[0].inject.query "api key" is not accepted: use a query parameter name of letters, digits, ".", "_", "~" and "-", such as "api_key"',
        ],
    ),
    (
        GH,
        {"actions[0].connections": ["github"]},
        [
            'check 27: actions[0].connections[0] "github" is not accepted: use a key of the pack\'s connections: "token"',
        ],
    ),
    (
        GH,
        {"actions[0].connections": ["token", "token"]},
        [
            'check 27: actions[0].connections[1] "token" is not accepted: list each connection once',
        ],
    ),
    (
        GH,
        {"actions[0].connections": "token"},
        [
            'check 27: actions[0].connections "token" is not accepted: use a list of the keys of the pack\'s connections, such as ["token"]',
        ],
    ),
    (
        OM,
        {"actions[0].connections": ["token"]},
        [
            'check 27: actions[0].connections[0] "token" is not accepted: the pack declares no connections',
        ],
    ),
    (
        ECHO,
        {"actions[0].connections": ["token"]},
        [
            'check 27: actions[0].connections ["token"] is not accepted: only http and js actions use connections: omit it',
        ],
    ),
    (
        GH,
        {"actions[0].impl.request.timeout": 5},
        [
            "check 28: actions[0].impl.request.timeout is not accepted: a request has only the fields method, url, query, headers, body",
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query": {"name": "${{ input.name }}", "count": [1, 2]}},
        [
            "check 28: actions[0].impl.request.query.count [1, 2] is not accepted: use a text, a number, true or false (a text may hold ${{ }})",
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query": {"name": "${{ input.name }}", "limit": None}},
        [
            "check 28: actions[0].impl.request.query.limit null is not accepted: use a text, a number, true or false (a text may hold ${{ }})",
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query": {"${{ input.k }}": "v"}},
        [
            'check 28: actions[0].impl.request.query "${{ input.k }}" is not accepted: a query parameter name is a literal text of 1 to 100 characters',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query": "name=x"},
        [
            'check 28: actions[0].impl.request.query "name=x" is not accepted: use an object of parameter name to value, such as {"q": "${{ input.q }}"}',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"Host": "evil.example.com"}},
        [
            'check 28: actions[0].impl.request.headers.Host "evil.example.com" is not accepted: the HTTP runtime sets Host, Content-Length and the hop-by-hop headers (Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade): remove it',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"transfer-encoding": "chunked"}},
        [
            'check 28: actions[0].impl.request.headers.transfer-encoding "chunked" is not accepted: the HTTP runtime sets Host, Content-Length and the hop-by-hop headers (Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade): remove it',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"Content-Length": "5"}},
        [
            'check 28: actions[0].impl.request.headers.Content-Length "5" is not accepted: the HTTP runtime sets Host, Content-Length and the hop-by-hop headers (Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade): remove it',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"Connection": "close"}},
        [
            'check 28: actions[0].impl.request.headers.Connection "close" is not accepted: the HTTP runtime sets Host, Content-Length and the hop-by-hop headers (Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade): remove it',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"X Bad": "1"}},
        [
            'check 28: actions[0].impl.request.headers "X Bad" is not accepted: a header name is a token such as "Accept" or "X-Api-Version"',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"X-Note": "a\r\nHost: evil"}},
        [
            'check 28: actions[0].impl.request.headers.X-Note "a\\r\\nHost: evil" is not accepted: use a text on one line (it may hold ${{ }})',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": {"X-Count": 3}},
        [
            "check 28: actions[0].impl.request.headers.X-Count 3 is not accepted: use a text on one line (it may hold ${{ }})",
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.headers": ["Accept: text/csv"]},
        [
            'check 28: actions[0].impl.request.headers ["Accept: text/csv"] is not accepted: use an object of header name to text, such as {"Accept": "text/csv"}',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.body": {"name": "${{ input.name }}"}},
        [
            'check 28: actions[0].impl.request.body {"name": "${{ input.name }}"} is not accepted: a GET request has no body: send one with POST, PUT or PATCH',
        ],
    ),
    (
        GH,
        {"actions[0].impl.request.headers.Authorization": "Bearer ${{ input.token }}"},
        [
            'check 29: actions[0].impl.request.headers.Authorization "Bearer ${{ input.token }}" is not accepted: the connection "token" injects this header: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH,
        {"actions[0].impl.request.headers.authorization": "token ${{ input.token }}"},
        [
            'check 29: actions[0].impl.request.headers.authorization "token ${{ input.token }}" is not accepted: the connection "token" injects this header: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH,
        keyed(KEY, **{"actions[0].impl.request.headers.x-api-key": "${{ input.key }}"}),
        [
            'check 29: actions[0].impl.request.headers.x-api-key "${{ input.key }}" is not accepted: the connection "key" injects this header: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH,
        keyed(QKEY, **{"actions[0].impl.request.query": {"API_KEY": "${{ input.key }}"}}),
        [
            'check 29: actions[0].impl.request.query.API_KEY "${{ input.key }}" is not accepted: the connection "key" injects this query parameter: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH,
        keyed(
            QKEY, **{"actions[0].impl.request.url": "https://api.github.com/repos?api_key=${{ input.key }}"}
        ),
        [
            'check 29: actions[0].impl.request.url "https://api.github.com/repos?api_key=${{ input.key }}" is not accepted: the connection "key" injects a query parameter: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH,
        keyed(QKEY, **{"actions[0].impl.request.url": "https://api.github.com/repos?${{ input.name }}=1"}),
        [
            'check 29: actions[0].impl.request.url "https://api.github.com/repos?${{ input.name }}=1" is not accepted: the connection "key" injects a query parameter: the egress proxy sets it and a template may not',
        ],
    ),
    (
        OM,
        {"actions[0].impl.timeoutMs": 5},
        [
            "check 30: actions[0].impl.timeoutMs is not accepted: an http impl has only the fields kind, request, response",
        ],
    ),
    (
        OM,
        {"actions[0].impl.response": "body"},
        [
            'check 30: actions[0].impl.response "body" is not accepted: use {"success": ..., "map": ..., "errors": [...]}, each optional, or omit it',
        ],
    ),
    (
        OM,
        {"actions[0].impl.response.headers": {"x": "y"}},
        [
            "check 30: actions[0].impl.response.headers is not accepted: a response has only the fields success, map, errors",
        ],
    ),
    (
        OM,
        {"actions[0].impl.response.success": "response.status == 200"},
        [
            'check 30: actions[0].impl.response.success "response.status == 200" is not accepted: use one ${{ }} expression such as "${{ response.status == 200 }}", or omit it for any 2xx',
        ],
    ),
    (
        OM,
        {"actions[0].impl.response.success": "${{ response.status == 200 }} and ${{ true }}"},
        [
            'check 30: actions[0].impl.response.success "${{ response.status == 200 }} and ${{ true }}" is not accepted: use one ${{ }} expression such as "${{ response.status == 200 }}", or omit it for any 2xx',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors": {"when": "${{ true }}"}},
        [
            'check 31: actions[0].impl.response.errors {"when": "${{ true }}"} is not accepted: use a list of {"when": "${{ ... }}", "code": "not_found", "message": ..., "retryable": false}',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].when": "response.status == 404"},
        [
            'check 31: actions[0].impl.response.errors[0].when "response.status == 404" is not accepted: use one ${{ }} expression such as "${{ response.status == 404 }}"',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].when": DELETE},
        [
            'check 31: actions[0].impl.response.errors[0].when is missing: use one ${{ }} expression such as "${{ response.status == 404 }}"',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].code": "IssueNotFound"},
        [
            'check 31: actions[0].impl.response.errors[0].code "IssueNotFound" is not accepted: use 1 to 60 lowercase letters, digits, "_" and "-", such as "not_found"',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].code": "x" * 61},
        [
            'check 31: actions[0].impl.response.errors[0].code "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" is not accepted: use 1 to 60 lowercase letters, digits, "_" and "-", such as "not_found"',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].code": DELETE},
        [
            'check 31: actions[0].impl.response.errors[0].code is missing: use 1 to 60 lowercase letters, digits, "_" and "-", such as "not_found"',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].message": ""},
        [
            'check 31: actions[0].impl.response.errors[0].message "" is not accepted: use a text of 1 to 1000 characters',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].retryable": "yes"},
        [
            'check 31: actions[0].impl.response.errors[0].retryable "yes" is not accepted: use true or false',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].status": 404},
        [
            "check 31: actions[0].impl.response.errors[0].status is not accepted: an error rule has only the fields when, code, message, retryable",
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[1]": "bad_credentials"},
        [
            'check 31: actions[0].impl.response.errors[1] "bad_credentials" is not accepted: use a list of {"when": "${{ ... }}", "code": "not_found", "message": ..., "retryable": false}',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query.name": "${{ input.( }}"},
        [
            'check 32: actions[0].impl.request.query.name "${{ input.( }}" is not accepted: ${{ input.( }} does not parse as CEL: syntax error at line 1, column 7',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query.name": "${{ size([" + "1," * 1000 + "1]) }}"},
        [
            'check 32: actions[0].impl.request.query.name "${{ size([1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,… is not accepted: ${{ size([1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1… }} is refused: the expression has 2,009 characters, more than the 2,000 one expression may have: split it across steps or fields',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query.name": "${{ " + "(" * 34 + "1" + ")" * 34 + " }}"},
        [
            'check 32: actions[0].impl.request.query.name "${{ ((((((((((((((((((((((((((((((((((1)))))))))))))))))))))))))))))))))) }}" is not accepted: ${{ ((((((((((((((((((((((((((((((((((1)))))))))))))))))))))))))))))))))) }} is refused: the expression nests more than 32 levels of operators, calls, member reads and brackets: split it across steps or fields',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query.name": "${{ input.name"},
        [
            'check 32: actions[0].impl.request.query.name "${{ input.name" is not accepted: its "${{" is not closed by "}}"',
        ],
    ),
    (
        OM,
        {"actions[0].impl.request.query.name": "${{ }}"},
        [
            'check 32: actions[0].impl.request.query.name "${{ }}" is not accepted: it holds an empty "${{ }}"',
        ],
    ),
    (
        OM,
        {"actions[0].impl.response.map.places": "${{ response.body.results[ }}"},
        [
            'check 32: actions[0].impl.response.map.places "${{ response.body.results[ }}" is not accepted: ${{ response.body.results[ }} does not parse as CEL: syntax error at line 1, column 22',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].when": "${{ response.status = 404 }}"},
        [
            'check 32: actions[0].impl.response.errors[0].when "${{ response.status = 404 }}" is not accepted: ${{ response.status = 404 }} does not parse as CEL: syntax error at line 1, column 17',
        ],
    ),
    (
        GH,
        {"actions[0].impl.response.errors[0].message": "No issue ${{ input.owner + }}"},
        [
            'check 32: actions[0].impl.response.errors[0].message "No issue ${{ input.owner + }}" is not accepted: ${{ input.owner + }} does not parse as CEL: syntax error at line 1, column 13',
        ],
    ),
    (
        GH,
        {"actions[1].impl.request.body.title": "${{ input.title) }}"},
        [
            'check 32: actions[1].impl.request.body.title "${{ input.title) }}" is not accepted: ${{ input.title) }} does not parse as CEL: syntax error at line 1, column 12',
        ],
    ),
    (
        GH,
        {"actions[0].impl.request.url": "https://api.github.com/repos/${{ input.owner ]] }}/x"},
        [
            'check 32: actions[0].impl.request.url "https://api.github.com/repos/${{ input.owner ]] }}/x" is not accepted: ${{ input.owner ]] }} does not parse as CEL: syntax error at line 1, column 13',
        ],
    ),
    (
        OM,
        {"actions[0].execution": {"timeoutMs": 60001}},
        [
            "check 18: actions[0].execution.timeoutMs 60001 is not accepted in this version: use an integer from 100 to 60000 (milliseconds), or omit it for 30000",
        ],
    ),
]


@pytest.mark.parametrize("name", ["open-meteo", "github"])
def test_the_example_packs_pass_every_check_and_model(name: str) -> None:
    manifest = json.loads((EXAMPLES / name / "b3pack.json").read_text())
    assert run_checks(manifest) == []
    assert parse_manifest(manifest).pack == f"io.b3os/{name}"


@pytest.mark.parametrize(("base", "changes", "expected"), CASES, ids=[str(list(c[1])) for c in CASES])
def test_a_refused_http_value_gets_its_exact_sentence(
    base: dict[str, Any], changes: dict[str, Any], expected: list[str]
) -> None:
    assert [v.message for v in run_checks(mutate(base, changes))] == expected


@pytest.mark.parametrize(
    ("base", "changes"),
    [
        (
            OM,
            {
                "actions[0].impl.request.url": "https://geocoding-api.open-meteo.com/v1/${{ input.a ? 's' : 't' }}#x"
            },
        ),
        (
            OM,
            {"actions[0].impl.request.url": "https://geocoding-api.open-meteo.com:443/v1/search?format=json"},
        ),
        (
            OM,
            {
                "actions[0].impl.request.query": {
                    "name": "${{ input.name }}",
                    "count": 10,
                    "exact": True,
                    "x": 0.5,
                }
            },
        ),
        (OM, {"actions[0].impl.response": {"success": " ${{ response.status == 200 }} ", "errors": []}}),
        (OM, {"actions[0].impl.response.map.places": "${{ '}}' + \"${{\" }}"}),
        (GH, {"connections[0].params": {"type": "object", "properties": {"org": {"type": "string"}}}}),
        (
            GH,
            {
                "egress": [{"host": "*.github.com"}, {"host": "api.github.com"}],
                "connections[0].hosts": ["*.api.github.com", "*.github.com", "uploads.github.com"],
            },
        ),
        (GH, keyed(KEY, **{"actions[0].impl.request.query": {"per_page": 10}})),
        (GH, keyed(QKEY, **{"actions[0].impl.request.headers.X-Api-Key": "${{ input.owner }}"})),
        (
            GH,
            {
                "connections": [],
                "actions[0].connections": DELETE,
                "actions[1].connections": [],
                "actions[0].impl.request.headers.X-Api-Key": "${{ input.owner }}",
            },
        ),
        (GH, {"actions[0].execution": {"timeoutMs": 100}, "actions[1].execution": {"timeoutMs": 60000}}),
    ],
)
def test_an_accepted_http_value_passes(base: dict[str, Any], changes: dict[str, Any]) -> None:
    assert run_checks(mutate(base, changes)) == []


def test_a_pack_whose_actions_no_executor_runs_is_refused() -> None:
    vm = {"kind": "vm", "protocol": "json-stdio", "cmd": ["/tool/bin/x"]}
    no_tool = [
        v.message for v in run_checks(mutate(OM, {"actions[0].impl": vm, "actions[0].effects.class": "pure"}))
    ]
    assert (
        "check 17: tool is missing: a pack with vm actions declares a tool section (kind, base, bundle, ...)"
        in no_tool
    )
    http_in_tool = run_checks(
        mutate(
            ECHO,
            {
                "actions[0].impl": {
                    "kind": "http",
                    "request": {"method": "GET", "url": "https://x.example.com"},
                }
            },
        )
    )
    assert (
        'check 17: actions[0].impl.kind "http" is not accepted in this version: every action of a tool pack is "vm"'
        in [v.message for v in http_in_tool]
    )
    assert [v.message for v in run_checks(mutate(OM, {"actions[0].impl.kind": "wasm"}))] == [
        'check 9: actions[0].impl.kind "wasm" is not accepted: use "http", "vm" or "js"'
    ]


def test_a_manifests_template_expressions_hold_at_most_32000_characters_in_all() -> None:
    body = ",".join(["1"] * 984)  # each expression ~1,990 characters: 16 fit, the 17th passes the cap
    query = {f"q{i}": f"${{{{ size([{i},{body}]) }}}}" for i in range(16)}
    assert run_checks(mutate(OM, {"actions[0].impl.request.query": query})) == []
    query.update(q16=f"${{{{ size([16,{body}]) }}}}", q17="${{ input.( }}")
    (violation,) = run_checks(mutate(OM, {"actions[0].impl.request.query": query}))
    assert (violation.check, violation.field) == (32, "actions[0].impl.request.query.q16")
    assert violation.message.endswith(
        "is not accepted: the templates' expressions pass here the 32,000 characters one manifest may have "
        "in all (33,616 up to this field): make them fewer or shorter"
    )  # and q17 is not parsed


def test_every_http_violation_is_reported_at_once() -> None:
    m = mutate(
        GH,
        {
            "connections[0].hosts": ["uploads.github.com"],
            "actions[0].impl.request.url": "https://${{ input.host }}/x",
            "actions[0].impl.request.headers.Authorization": "Bearer ${{ input.t }}",
            "actions[0].impl.response.errors[0].code": "Not Found",
            "actions[0].impl.response.map.title": "${{ response.body.title. }}",
            "actions[1].impl.request.method": "GET",
        },
    )
    assert [(v.check, v.field) for v in run_checks(m)] == [
        (11, "actions[0].impl.request.url"),
        (25, "connections[0].hosts[0]"),
        (28, "actions[1].impl.request.body"),
        (29, "actions[0].impl.request.headers.Authorization"),
        (31, "actions[0].impl.response.errors[0].code"),
        (32, "actions[0].impl.response.map.title"),
    ]


def test_garbage_in_every_http_field_never_raises() -> None:
    garbage = mutate(GH, {"connections": [7, {"key": "k", "kind": 7, "hosts": 7, "inject": 7, "params": 7}]})
    garbage["actions"][0]["connections"] = [7, None]
    garbage["actions"][0]["impl"] = {
        "kind": "http",
        "request": {"method": 7, "url": 7, "query": {"a": {}}, "headers": 7, "body": 7},
        "response": {
            "success": 7,
            "map": [{"x": 7}],
            "errors": [7, {"when": 7, "code": 7, "message": 7, "retryable": 7}],
        },
    }
    garbage["actions"][1]["impl"] = {"kind": "http", "request": 7, "response": 7}
    assert len(run_checks(garbage)) > 15


def test_every_check_has_a_failing_fixture_here_or_in_the_general_cases() -> None:
    from test_pack_js import JS_CASES
    from test_pack_triggers import TRIGGER_CASES

    cases = [*GENERAL_CASES, *CASES, *JS_CASES, *TRIGGER_CASES]
    covered = {int(msg.split(":")[0].removeprefix("check ")) for _, _, msgs in cases for msg in msgs}
    # 35 and 41 need the files: test_pack_js and test_pack_fixtures build packs that fail them
    assert covered | {35, 41} == set(CHECKS)
