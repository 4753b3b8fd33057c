"""What a client meets at the api's edge, over real HTTP to a real api process (tests/api/liveapi.py):

- `HEAD` answers as `GET` does, without the body, on every path whose `Allow` header lists it (load
  balancers probe with `HEAD`);
- a JSON-limit error names a member by its text (`input.café`), not by its UTF-8 bytes;
- `/openapi.json` declares what the server checks, and the server takes what it declares: an integer
  sent as `5000.0` (JSON Schema's `integer`), a re-run's `from` (at least 1 character), a connection
  secret's shapes and the bounds of its `expires_at`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import loopback
import pytest
from liveapi import ECHO_REF, LiveApi, start_live_api

from api.connections.service import check_secret
from api.errors import ApiError
from api.jsonbody import MAX_SAFE_INTEGER

GET_PATHS = ["/healthz", "/v1/keys", "/v1/actions/packs", "/v1/routines", "/docs", "/redoc", "/openapi.json"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    api = start_live_api(tmp_path_factory.mktemp("contract"))
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def http(live: LiveApi) -> Iterator[httpx.Client]:
    with loopback.client(base_url=live.url, timeout=30, headers=live.owner.headers) as client:
        yield client


@pytest.fixture(scope="module")
def document(live: LiveApi) -> dict[str, Any]:
    body: dict[str, Any] = loopback.get(f"{live.url}/openapi.json").json()
    return body


def refused(r: httpx.Response, field: str) -> str:
    """Assert a 400 invalid_request naming `field`; its sentence."""
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field), error
    message: str = error["message"]
    return message


# --- HEAD ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", GET_PATHS)
@pytest.mark.parametrize("keyed", [True, False])
def test_head_answers_as_get_does_without_the_body(live: LiveApi, path: str, keyed: bool) -> None:
    headers = live.owner.headers if keyed else {}
    with loopback.client(base_url=live.url, timeout=30, headers=headers) as client:
        got, head = client.get(path), client.head(path)
    assert head.status_code == got.status_code, head.text
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
    if keyed:
        assert head.status_code == 200


def test_every_method_the_allow_header_lists_is_answered(http: httpx.Client) -> None:
    for path in ["/healthz", "/v1/keys", "/v1/actions/packs", "/v1/routines", "/docs", "/redoc"]:
        refusal = http.request("PATCH", path)
        assert refusal.status_code == 405, (path, refusal.text)
        allowed = [m.strip() for m in refusal.headers["allow"].split(",")]
        assert "HEAD" in allowed and "GET" in allowed, (path, allowed)
        for method in allowed:
            if method in ("GET", "HEAD"):
                assert http.request(method, path).status_code == 200, (path, method)


def test_head_where_get_is_not_allowed_is_refused_as_get_is(http: httpx.Client) -> None:
    head = http.head("/v1/actions/call")
    assert (head.status_code, head.content, head.headers["allow"]) == (405, b"", "POST")


# --- field names --------------------------------------------------------------------------------------


def test_a_limit_error_names_a_non_ascii_member_by_its_text(http: httpx.Client) -> None:
    body = '{"ref": "' + ECHO_REF + '", "input": {"café": {"naïve": "a\\udaacb"}}}'
    r = http.post("/v1/actions/call", content=body.encode(), headers={"Content-Type": "application/json"})
    message = refused(r, "input.café.naïve")
    assert message.startswith("The field input.café.naïve holds text that is not valid Unicode")
    key = '{"ref": "x", "input": {"café\\ud800": 1}}'
    r = http.post("/v1/actions/call", content=key.encode(), headers={"Content-Type": "application/json"})
    refused(r, "input.café\\ud800")  # the lone surrogate alone as its escape: no UTF-8 carries it


# --- what the schema declares, the server takes ---------------------------------------------------------


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["schemas"][name]
    return schema


def _call_body(document: dict[str, Any]) -> dict[str, Any]:
    operation = document["paths"]["/v1/actions/call"]["post"]
    schema: dict[str, Any] = operation["requestBody"]["content"]["application/json"]["schema"]
    return schema


def test_an_integer_sent_as_a_whole_float_is_the_integer_the_schema_declares(
    http: httpx.Client, document: dict[str, Any]
) -> None:
    schema = _call_body(document)
    (declared, _) = schema["properties"]["timeout_ms"]["anyOf"]
    assert declared == {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER}
    for whole in (20000.0, 2e4):  # the echo tool is priced: at least its own timeout of 10 s
        body = {"ref": ECHO_REF, "input": {"text": "hi"}, "timeout_ms": whole}
        jsonschema.validate(body, schema)  # JSON Schema's integer: any number without a fraction
        r = http.post("/v1/actions/call", json=body)
        # past every check of the body: no node runs here, so the call itself waits for one
        assert (r.status_code, r.json()["error"]["code"]) == (503, "pack_unavailable"), r.text
    for wrong in (5000.5, 0.0, True, "5000"):
        body = {"ref": ECHO_REF, "input": {"text": "hi"}, "timeout_ms": wrong}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(body, schema)
        refused(http.post("/v1/actions/call", json=body), "timeout_ms")
    spend_cap = {"name": "capped", "scopes": ["actions:call"], "monthly_spend_cap_microusd": 2.5e6}
    made = http.post("/v1/keys", json=spend_cap)
    assert made.status_code == 201 and made.json()["monthly_spend_cap_microusd"] == 2_500_000, made.text


def test_a_reruns_from_is_declared_as_the_server_checks_it(
    http: httpx.Client, document: dict[str, Any]
) -> None:
    schema = _schema(document, "RerunCreate")
    (declared, _) = schema["properties"]["from"]["anyOf"]
    assert declared["minLength"] == 1 and declared["maxLength"] == 64
    for empty in ("", "not a step"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"from": empty}, schema)
        refused(http.post("/v1/runs/run_nope/rerun", json={"from": empty}), "from")
    jsonschema.validate({"from": "parse"}, schema)
    assert http.post("/v1/runs/run_nope/rerun", json={"from": "parse"}).status_code == 404  # past the body


SECRETS: list[tuple[str, Any]] = [
    ("bearer", "t0k3n"),
    ("bearer", ""),
    ("bearer", "a\nb"),
    ("bearer", "x" * 4097),
    ("basic", {"username": "ann", "password": "pw"}),
    ("basic", {"username": "a:n", "password": "pw"}),
    ("basic", {"username": "ann"}),
    ("oauth2", {"access_token": "at"}),
    ("oauth2", {"access_token": "at", "expires_at": 0}),
    ("oauth2", {"access_token": "at", "expires_at": MAX_SAFE_INTEGER}),
    ("oauth2", {"access_token": "at", "expires_at": 1767225600.0}),
    ("oauth2", {"access_token": "at", "expires_at": -1}),
    ("oauth2", {"access_token": "at", "expires_at": 1.5}),
    ("oauth2", {"access_token": "at", "expires_at": "2026-12-04T10:00:00Z"}),
    ("oauth2", {"access_token": "at", "token_url": "https://auth.example.com/token"}),
    ("oauth2", {"access_token": "at", "token_url": "http://auth.example.com/token"}),
    ("oauth2", {"access_token": "at", "scope": "read"}),
]


@pytest.mark.parametrize(("kind", "secret"), SECRETS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SECRETS)])
def test_a_connection_secret_is_valid_by_the_schema_exactly_when_the_server_takes_it(
    document: dict[str, Any], kind: str, secret: Any
) -> None:
    declared = _schema(document, "ConnectionCreate")["properties"]["secret"]
    (shape,) = [s for s in declared["anyOf"] if kind in s["title"]]
    try:
        check_secret(kind, secret)
    except ApiError:
        taken = False
    else:
        taken = True
    try:
        jsonschema.validate(secret, shape, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    except jsonschema.ValidationError:
        valid = False
    else:
        valid = True
    assert valid == taken, json.dumps(secret)[:200]


def test_a_connection_secrets_expires_at_is_declared_within_the_integers_json_keeps(
    document: dict[str, Any],
) -> None:
    declared = _schema(document, "ConnectionCreate")["properties"]["secret"]
    (oauth2,) = [s for s in declared["anyOf"] if s["title"] == "oauth2"]
    (integer, text) = oauth2["properties"]["expires_at"]["anyOf"]
    assert integer == {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}
    assert text == {"type": "string", "format": "date-time"}
