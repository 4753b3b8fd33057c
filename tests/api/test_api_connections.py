"""Connections: credentials of declarative packs, sealed to the egress proxy, never read back by the api."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from apitest import KID, NAMESPACE, Org, register_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlmodel import Session
from workers import PATIENCE_S

from api.accounts.scopes import CONNECTIONS_READ, CONNECTIONS_WRITE
from api.config import Settings
from api.connections import service
from api.connections.tables import ConnectionRecord
from api.main import create_app
from cli.main import main
from egress.sealing import SealError, connection_binding, generate_key, open_sealed, public_key_b64, seal
from packs.signing import sign_manifest

PACK = f"{NAMESPACE}/weather"
API_HOST, AUTH_HOST = "api.weather.example.com", "auth.weather.example.com"
PUBLIC = {"id", "pack", "connection", "kind", "params", "hosts", "hint", "created_at"}
TEXT = "a text of 1 to 4096 characters without control characters"
TAKES = {
    "api_key": f"secret as {TEXT}",
    "bearer": f"secret as {TEXT}",
    "basic": f'secret as {{"username", "password"}}, each {TEXT} (the username without ":")',
    "oauth2": 'secret as {"access_token", "refresh_token"?, "expires_at"?, "token_url"?, "client_id"?, '
    f'"client_secret"?}}: texts, each {TEXT}, token_url an https URL, expires_at RFC 3339 or integer '
    "unix seconds",
}


KEYS = "api-key, token, login, oauth"
NOT_A_TIME = "neither RFC 3339 nor integer unix seconds"


def _secret() -> str:
    return "s3cr3t-" + secrets.token_hex(16)


def weather_manifest() -> dict[str, Any]:
    """A declarative pack with one connection of each kind."""
    return {
        "pack": PACK,
        "version": "1.0.0",
        "title": "Weather",
        "description": "The weather now at a place, from an example API.",
        "publisher": {"id": NAMESPACE, "name": "Example"},
        "license": "MIT",
        "engine": "^1.0",
        "egress": [{"host": API_HOST}, {"host": AUTH_HOST}],
        "connections": [
            {
                "key": "api-key",
                "kind": "api_key",
                "title": "API key",
                "hosts": [API_HOST],
                "inject": {"header": "X-Api-Key"},
                "params": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["account"],
                    "properties": {
                        "account": {"type": "integer", "minimum": 1},
                        "region": {"type": "string", "enum": ["eu", "us"], "default": "eu"},
                    },
                },
            },
            {"key": "token", "kind": "bearer", "title": "Token", "hosts": [API_HOST]},
            {"key": "login", "kind": "basic", "title": "Login", "hosts": [API_HOST]},
            {
                "key": "oauth",
                "kind": "oauth2",
                "title": "OAuth",
                "hosts": [API_HOST, AUTH_HOST],
                "params": {"type": "object", "properties": {"scope": {"type": "string"}}},
            },
        ],
        "actions": [
            {
                "key": "current",
                "title": "Current weather",
                "description": "The weather now at a place.",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
                "outputSchema": {"type": "object"},
                "effects": {"class": "read"},
                "connections": ["api-key"],
                "impl": {
                    "kind": "http",
                    "request": {
                        "method": "GET",
                        "url": f"https://{API_HOST}/v1/current",
                        "query": {"q": "x"},
                    },
                },
            }
        ],
    }


DEFINITIONS = {c["key"]: c for c in weather_manifest()["connections"]}


@pytest.fixture
def proxy_key() -> X25519PrivateKey:
    return generate_key()


@pytest.fixture
def settings(settings: Settings, proxy_key: X25519PrivateKey) -> Settings:
    return settings.model_copy(update={"egress_public_key": public_key_b64(proxy_key)})


@pytest.fixture
def owner(client: TestClient, make_org: Callable[..., Org]) -> Org:
    """An organization that publishes the weather pack (a declarative pack's bundle is its manifest)."""
    org = make_org(namespaces=[NAMESPACE])
    key = Ed25519PrivateKey.generate()
    register_key(client, org, key)
    signed = sign_manifest(weather_manifest(), [], key, KID)
    r = client.post("/v1/actions/packs", headers=org.headers, json={"manifest": signed, "files": []})
    assert r.status_code == 201, r.text
    return org


def _add(client: TestClient, org: Org, connection: str, secret: Any, params: Any = None, **more: Any) -> Any:
    body = {"pack": PACK, "connection": connection, "secret": secret, **more}
    if params is not None:
        body["params"] = params
    return client.post("/v1/connections", headers=org.headers, json=body)


def _row(app: FastAPI, connection_id: str) -> ConnectionRecord:
    with Session(app.state.engine) as session:
        row = session.get(ConnectionRecord, connection_id)
        assert row is not None
        return row


def _opened(app: FastAPI, key: X25519PrivateKey, org: Org, connection_id: str) -> dict[str, Any]:
    row = _row(app, connection_id)
    return open_sealed(key, row.sealed, binding=connection_binding(org.org_id, connection_id))


def _payload(connection: str, secret: Any) -> dict[str, Any]:
    d = DEFINITIONS[connection]
    return {"kind": d["kind"], "hosts": d["hosts"], "inject": d.get("inject"), "secret": secret}


def _no_connection(name: str) -> str:
    return f"The pack {PACK} (version 1.0.0) has no connection {name}: its connections are {KEYS}."


def _error(r: Any, status: int, field: str | None, message: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] == message
    if field is not None:
        assert error["field"] == field


def test_each_kind_is_sealed_to_the_proxy_alone_and_listed(
    client: TestClient, app: FastAPI, owner: Org, proxy_key: X25519PrivateKey
) -> None:
    key, token, password, access, refresh = _secret(), "short-token", _secret(), _secret(), _secret()
    oauth = {
        "access_token": access,
        "refresh_token": refresh,
        "expires_at": "2030-01-01T00:00:00Z",
        "token_url": f"https://{AUTH_HOST}/token",
        "client_id": "weather-app",
        "client_secret": "client-" + secrets.token_hex(8),
    }
    added = {
        "api-key": _add(client, owner, "api-key", key, {"account": 7}),
        "token": _add(client, owner, "token", token),
        "login": _add(client, owner, "login", {"username": "ann", "password": password}),
        "oauth": _add(client, owner, "oauth", oauth, {"scope": "read"}),
    }
    for name, r in added.items():
        assert r.status_code == 201, r.text
        body = r.json()
        assert set(body) == PUBLIC and body["id"].startswith("conn_")
        assert (body["pack"], body["connection"], body["kind"]) == (PACK, name, DEFINITIONS[name]["kind"])
    ids = {name: r.json()["id"] for name, r in added.items()}
    assert added["api-key"].json()["params"] == {"account": 7, "region": "eu"}  # the schema's default
    assert added["token"].json()["params"] == {} and added["oauth"].json()["params"] == {"scope": "read"}
    hints = {name: r.json()["hint"] for name, r in added.items()}
    assert hints == {"api-key": key[-4:], "token": "", "login": password[-4:], "oauth": access[-4:]}

    assert _opened(app, proxy_key, owner, ids["api-key"]) == _payload("api-key", key)
    assert _opened(app, proxy_key, owner, ids["token"]) == _payload("token", token)
    assert _opened(app, proxy_key, owner, ids["login"]) == _payload(
        "login", {"username": "ann", "password": password}
    )
    assert _opened(app, proxy_key, owner, ids["oauth"]) == _payload(
        "oauth", {**oauth, "expires_at": 1893456000}
    )
    # The token is bound to its row: copied to another connection it does not open, nor with another key.
    with pytest.raises(SealError):
        open_sealed(
            proxy_key, _row(app, ids["token"]).sealed, binding=connection_binding(owner.org_id, ids["login"])
        )
    with pytest.raises(SealError):
        _opened(app, generate_key(), owner, ids["token"])

    listed = client.get("/v1/connections", headers=owner.headers)
    assert listed.status_code == 200
    items = listed.json()["items"]
    assert [i["connection"] for i in items] == ["api-key", "login", "oauth", "token"]
    assert all(set(i) == PUBLIC | {"updated_at"} for i in items)
    assert {i["id"]: i["hint"] for i in items} == {ids[n]: h for n, h in hints.items()}
    # each shows the hosts its secret goes to: those sealed with it
    assert {i["connection"]: i["hosts"] for i in items} == {n: DEFINITIONS[n]["hosts"] for n in added}
    assert all(r.json()["hosts"] == DEFINITIONS[n]["hosts"] for n, r in added.items())


def test_adding_it_again_replaces_the_secret_and_params_and_keeps_the_id(
    client: TestClient, app: FastAPI, owner: Org, proxy_key: X25519PrivateKey
) -> None:
    first, second = _secret(), _secret()
    one = _add(client, owner, "api-key", first, {"account": 1}).json()
    time.sleep(0.01)
    r = _add(client, owner, "api-key", second, {"account": 2, "region": "us"})
    assert r.status_code == 201, r.text
    two = r.json()
    assert two["id"] == one["id"] and two["created_at"] == one["created_at"]
    assert two["params"] == {"account": 2, "region": "us"} and two["hint"] == second[-4:]
    assert _opened(app, proxy_key, owner, one["id"]) == _payload("api-key", second)
    (item,) = client.get("/v1/connections", headers=owner.headers).json()["items"]
    assert item["id"] == one["id"] and item["updated_at"] > item["created_at"]


def test_concurrent_adds_of_one_connection_leave_one_row_holding_one_of_their_secrets(
    client: TestClient, app: FastAPI, settings: Settings, owner: Org, proxy_key: X25519PrivateKey
) -> None:
    tokens = [_secret() for _ in range(6)]
    barrier = threading.Barrier(len(tokens))
    ids: list[str] = []

    def add(token: str) -> None:
        with Session(app.state.engine) as session:
            barrier.wait()
            row = service.add_connection(
                session,
                settings=settings,
                org_id=owner.org_id,
                pack=PACK,
                connection="token",
                params=None,
                secret=token,
            )
            ids.append(row.id)

    threads = [threading.Thread(target=add, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(ids) == len(tokens) and len(set(ids)) == 1
    (item,) = client.get("/v1/connections", headers=owner.headers).json()["items"]
    assert _opened(app, proxy_key, owner, item["id"])["secret"] in tokens


def test_a_wrong_pack_connection_or_params_is_refused_naming_the_field(
    client: TestClient, owner: Org
) -> None:
    refusals: list[tuple[dict[str, Any], int, str, str]] = [
        ({"pack": f"{NAMESPACE}/nope"}, 404, "pack", f"There is no pack {NAMESPACE}/nope in the registry."),
        ({"connection": "nope"}, 404, "connection", _no_connection("nope")),
        ({"params": None}, 400, "params", "'account' is a required property."),
        (
            {"params": {"account": 3, "region": "mars"}},
            400,
            "params.region",
            "'mars' is not one of ['eu', 'us'].",
        ),
        ({"password": "x"}, 400, "password", "The field password is not accepted here."),
    ]
    for change, status, field, message in refusals:
        body = {
            "pack": PACK,
            "connection": "api-key",
            "params": {"account": 3},
            "secret": _secret(),
            **change,
        }
        r = client.post(
            "/v1/connections", headers=owner.headers, json={k: v for k, v in body.items() if v is not None}
        )
        assert r.status_code == status, (change, r.text)
        assert r.json()["error"]["field"] == field and r.json()["error"]["message"].endswith(message), r.text
    _error(
        _add(client, owner, "token", "x", {"region": "eu"}),
        400,
        "params.region",
        "The field params.region is not accepted: the connection token takes no params.",
    )
    _error(
        _add(client, owner, "api-key", "x", {"account": 0}),
        400,
        "params.account",
        "The field params.account is invalid: 0 is less than the minimum of 1.",
    )
    r = client.post("/v1/connections", headers=owner.headers, json={"pack": PACK, "connection": "api-key"})
    _error(r, 400, "secret", "The field secret is required.")
    assert client.get("/v1/connections", headers=owner.headers).json() == {"items": []}


def test_a_secret_of_the_wrong_shape_is_refused_without_its_value(client: TestClient, owner: Org) -> None:
    s = _secret()
    wrong: list[tuple[str, Any, str]] = [
        ("api-key", {"key": s}, "secret is not a text"),
        ("api-key", s + "x" * 4096, f"secret has {len(s) + 4096} characters"),
        ("api-key", "", "secret has 0 characters"),
        ("api-key", 12345678901234, "secret is not a text"),
        ("api-key", None, "secret is absent"),
        ("token", s + "\n", "secret holds a control character"),
        ("login", s, "secret is not a JSON object"),
        ("login", {"username": s}, "secret.password is absent"),
        ("login", {"username": "a:b", "password": s}, 'secret.username holds ":"'),
        (
            "login",
            {"username": "a", "password": s, s: s},
            "secret has fields a basic connection does not take",
        ),
        ("oauth", {"refresh_token": s}, "secret.access_token is absent"),
        ("oauth", {"access_token": s, s: 1}, "secret has fields an oauth2 connection does not take"),
        (
            "oauth",
            {"access_token": s, "token_url": f"http://{AUTH_HOST}/t"},
            "secret.token_url is not an https URL",
        ),
        ("oauth", {"access_token": s, "expires_at": "tomorrow"}, f"secret.expires_at is {NOT_A_TIME}"),
        ("oauth", {"access_token": s, "expires_at": True}, f"secret.expires_at is {NOT_A_TIME}"),
        ("oauth", {"access_token": s, "client_secret": 7}, "secret.client_secret is not a text"),
    ]
    for connection, secret, problem in wrong:
        kind = DEFINITIONS[connection]["kind"]
        r = _add(client, owner, connection, secret, {"account": 3} if connection == "api-key" else None)
        article = "an" if kind in ("api_key", "oauth2") else "a"
        message = f"The field secret is not what {article} {kind} connection takes ({problem}): "
        message += f"it takes {TAKES[kind]}."
        _error(r, 400, "secret", message)
        assert s not in r.text and s[-12:] not in r.text, r.text
    assert client.get("/v1/connections", headers=owner.headers).json() == {"items": []}


def test_a_refused_replacement_leaves_the_stored_connection_as_it_was(
    client: TestClient, app: FastAPI, owner: Org, proxy_key: X25519PrivateKey
) -> None:
    kept = _secret()
    added = _add(client, owner, "api-key", kept, {"account": 5}).json()
    sealed = _row(app, added["id"]).sealed
    assert _add(client, owner, "api-key", _secret(), {"account": -1}).status_code == 400
    assert _add(client, owner, "api-key", {"no": "shape"}, {"account": 6}).status_code == 400
    assert _row(app, added["id"]).sealed == sealed
    (item,) = client.get("/v1/connections", headers=owner.headers).json()["items"]
    assert item["params"] == {"account": 5, "region": "eu"} and item["updated_at"] == item["created_at"]


def test_without_the_proxy_key_adding_answers_503_and_writes_nothing(
    client: TestClient, settings: Settings, owner: Org
) -> None:
    bare = create_app(settings.model_copy(update={"egress_public_key": None}))
    with TestClient(bare) as unconfigured:
        r = _add(unconfigured, owner, "token", _secret())
        _error(
            r,
            503,
            None,
            "The egress proxy is not configured, so no connection can be sealed: set B3OS_EGRESS_PUBLIC_KEY "
            "or B3OS_EGRESS_URL + B3OS_EGRESS_TOKEN on the api.",
        )
        assert r.json()["error"]["code"] == "unavailable" and int(r.headers["retry-after"]) >= 1
        # Validation still comes first: a wrong request is told what is wrong with it.
        _error(_add(unconfigured, owner, "nope", "x"), 404, "connection", _no_connection("nope"))
        assert unconfigured.get("/v1/connections", headers=owner.headers).json() == {"items": []}
    bare.state.engine.dispose()


class _Proxy(BaseHTTPRequestHandler):
    """The egress proxy's public-key endpoint (the one seam of the proxy the api uses here)."""

    key: X25519PrivateKey
    token: str
    asked: list[str]

    def do_GET(self) -> None:  # noqa: N802
        self.asked.append(self.path)
        if (
            self.path != "/v1/egress/public-key"
            or self.headers.get("Authorization") != f"Bearer {self.token}"
        ):
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"public_key": public_key_b64(self.key)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[str, type[_Proxy]]]:
    handler = type(
        "Proxy", (_Proxy,), {"key": generate_key(), "token": "proxy-" + secrets.token_hex(8), "asked": []}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_the_key_is_asked_once_from_the_proxy_with_its_token(
    client: TestClient, settings: Settings, owner: Org, proxy: tuple[str, type[_Proxy]]
) -> None:
    url, handler = proxy
    asking = settings.model_copy(
        update={"egress_public_key": None, "egress_url": url + "/", "egress_token": handler.token}
    )
    fetching = create_app(asking)
    with TestClient(fetching) as c:
        ids = [_add(c, owner, "token", _secret()).json()["id"] for _ in range(2)]
    assert handler.asked == ["/v1/egress/public-key"] and ids[0] == ids[1]
    assert _opened(fetching, handler.key, owner, ids[0])["kind"] == "bearer"
    fetching.state.engine.dispose()

    wrong = create_app(asking.model_copy(update={"egress_token": "not-the-token"}))
    with TestClient(wrong) as c:
        r = _add(c, owner, "token", _secret())
    _error(
        r,
        503,
        None,
        f"The egress proxy at {url} did not give its public key (it answered 401), so no connection can be "
        "sealed: check B3OS_EGRESS_URL and B3OS_EGRESS_TOKEN.",
    )
    assert "not-the-token" not in r.text and r.headers["retry-after"] == "5"
    wrong.state.engine.dispose()


def test_each_scope_is_needed(client: TestClient, owner: Org, add_key: Callable[..., Org]) -> None:
    reader, writer = add_key(owner, [CONNECTIONS_READ]), add_key(owner, [CONNECTIONS_WRITE])
    _error(_add(client, reader, "token", _secret()), 403, None, "This key lacks the scope connections:write.")
    added = _add(client, writer, "token", _secret())
    assert added.status_code == 201
    _error(
        client.get("/v1/connections", headers=writer.headers),
        403,
        None,
        "This key lacks the scope connections:read.",
    )
    assert len(client.get("/v1/connections", headers=reader.headers).json()["items"]) == 1
    r = client.delete(f"/v1/connections/{added.json()['id']}", headers=reader.headers)
    _error(r, 403, None, "This key lacks the scope connections:write.")
    assert r.json()["error"]["missing_scope"] == CONNECTIONS_WRITE
    assert client.delete(f"/v1/connections/{added.json()['id']}", headers=writer.headers).status_code == 204


def test_another_organization_neither_sees_nor_removes_it(
    client: TestClient, owner: Org, make_org: Callable[..., Org]
) -> None:
    other = make_org(name="other org")
    theirs = _add(client, other, "token", _secret()).json()
    mine = _add(client, owner, "token", _secret()).json()
    assert theirs["id"] != mine["id"]
    assert [i["id"] for i in client.get("/v1/connections", headers=other.headers).json()["items"]] == [
        theirs["id"]
    ]
    r = client.delete(f"/v1/connections/{mine['id']}", headers=other.headers)
    _error(r, 404, "id", f"Your organization has no connection {mine['id']}.")
    _error(
        client.delete("/v1/connections/conn_unknown", headers=owner.headers),
        404,
        "id",
        "Your organization has no connection conn_unknown.",
    )
    r = client.delete(f"/v1/connections/{mine['id']}", headers=owner.headers)
    assert r.status_code == 204 and r.content == b""
    assert client.get("/v1/connections", headers=owner.headers).json() == {"items": []}
    assert client.delete(f"/v1/connections/{mine['id']}", headers=owner.headers).status_code == 404
    assert len(client.get("/v1/connections", headers=other.headers).json()["items"]) == 1


def _database_bytes(app: FastAPI, migrated_database_url: str, request: pytest.FixtureRequest) -> bytes:
    """Every row of every table, and the database's files on disk."""
    engine = app.state.engine
    dump = []
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            dump.extend(repr(tuple(row)) for row in conn.execute(text(f'SELECT * FROM "{table}"')))
    files: list[Path] = []
    if migrated_database_url.startswith("sqlite"):
        db = Path(migrated_database_url.removeprefix("sqlite:///"))
        files = [p for p in db.parent.iterdir() if p.name.startswith(db.name)]
    else:
        with engine.connect() as conn:
            conn.execute(text("CHECKPOINT"))
        cluster = request.getfixturevalue("postgres_cluster")
        files = [p for p in (cluster.directory / "data").rglob("*") if p.is_file()]
    return "\n".join(dump).encode() + b"".join(_read_if_still_there(p) for p in files)


def _read_if_still_there(path: Path) -> bytes:
    """A file's bytes, or none when the server removed it since it was listed (a transient file of
    PostgreSQL's, such as a relation cache's `pg_internal.init`)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def test_the_secret_is_nowhere_but_sealed_and_the_sealed_token_in_no_answer_or_log(
    client: TestClient,
    app: FastAPI,
    owner: Org,
    migrated_database_url: str,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="b3os")
    caplog.set_level(logging.DEBUG, logger="httpx")
    key, token, password, access, refresh, client_secret = (_secret() for _ in range(6))
    answers = [
        _add(client, owner, "api-key", key, {"account": 1}),
        _add(client, owner, "token", token),
        _add(client, owner, "token", token + "-2"),
        _add(client, owner, "login", {"username": "ann", "password": password}),
        _add(
            client,
            owner,
            "oauth",
            {"access_token": access, "refresh_token": refresh, "client_secret": client_secret},
        ),
        _add(client, owner, "token", token + "\x00"),
        _add(client, owner, "login", {"username": password, "password": 1}),
        _add(client, owner, "oauth", {"access_token": access, "token_url": "http://" + refresh}),
        client.get("/v1/connections", headers=owner.headers),
        client.get("/openapi.json"),
    ]
    said = "\n".join(r.text for r in answers) + "\n" + caplog.text
    with Session(app.state.engine) as session:
        sealed = [row.sealed for row in service.list_connections(session, org_id=owner.org_id)]
    assert len(sealed) == 4
    for value in (key, token, password, access, refresh, client_secret, *sealed):
        assert value not in said and value[7:] not in said
    stored = _database_bytes(app, migrated_database_url, request)
    for value in (key, token, password, access, refresh, client_secret):
        assert value.encode() not in stored and value[7:].encode() not in stored


def test_connections_for_and_replace_sealed_serve_the_call_path(
    client: TestClient, app: FastAPI, owner: Org, make_org: Callable[..., Org], proxy_key: X25519PrivateKey
) -> None:
    api_key = _add(client, owner, "api-key", _secret(), {"account": 9}).json()
    oauth = _add(client, owner, "oauth", {"access_token": _secret(), "refresh_token": _secret()}).json()
    other = make_org(name="other org")
    binding = connection_binding(owner.org_id, oauth["id"])
    with Session(app.state.engine) as session:
        found = service.connections_for(session, org_id=owner.org_id, pack=PACK)
        assert {k: r.id for k, r in found.items()} == {"api-key": api_key["id"], "oauth": oauth["id"]}
        assert found["api-key"].params == {"account": 9, "region": "eu"} and found["oauth"].kind == "oauth2"
        assert service.connections_for(session, org_id=other.org_id, pack=PACK) == {}
        assert service.connections_for(session, org_id=owner.org_id, pack=f"{NAMESPACE}/other") == {}
        old = found["oauth"].sealed
    refreshed = seal(public_key_b64(proxy_key), _payload("oauth", {"access_token": "fresh"}), binding=binding)
    with Session(app.state.engine) as session:
        args = {"org_id": owner.org_id, "connection_id": oauth["id"], "new_sealed": refreshed}
        assert service.replace_sealed(session, **args, old_sealed=old) is True
        assert service.replace_sealed(session, **args, old_sealed=old) is False  # stale: the newer one stays
        assert (
            service.replace_sealed(session, **{**args, "org_id": other.org_id}, old_sealed=refreshed) is False
        )
        with pytest.raises(ValueError, match="new_sealed is not a b3seal-v1 token"):
            service.replace_sealed(session, **{**args, "new_sealed": "plain"}, old_sealed=refreshed)
    assert _opened(app, proxy_key, owner, oauth["id"])["secret"] == {"access_token": "fresh"}


# --- the CLI, against a real api (uvicorn on 127.0.0.1) -------------------------------------------


@pytest.fixture
def api_url(app: FastAPI) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + PATIENCE_S
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_the_cli_adds_from_stdin_lists_and_removes(
    api_url: str,
    app: FastAPI,
    owner: Org,
    proxy_key: X25519PrivateKey,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def b3os(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = main([*args, "--api-url", api_url, "--api-key", owner.key])
        out, err = capsys.readouterr()
        return code, out, err

    token, password, access = _secret(), _secret(), _secret()
    code, out, _ = b3os("connection", "add", PACK, "token", "--secret-stdin", stdin=token + "\n")
    assert code == 0
    match = re.fullmatch(
        rf"added (conn_\w+) {PACK} token \(bearer, …{token[-4:]}\)\nits secret is sent only to: {API_HOST}\n",
        out,
    )
    assert match, out
    assert _opened(app, proxy_key, owner, match[1]) == _payload("token", token)
    code, out, _ = b3os("connection", "add", PACK, "login", "--secret-stdin", stdin=f"ann:{password}\n")
    login = out.split()[1]
    assert code == 0 and _opened(app, proxy_key, owner, login)["secret"] == {
        "username": "ann",
        "password": password,
    }
    code, out, _ = b3os(
        "connection",
        "add",
        PACK,
        "oauth",
        "--secret-stdin",
        "--params-json",
        '{"scope": "read"}',
        stdin=json.dumps({"access_token": access, "expires_at": 1893456000}),
    )
    assert code == 0 and out.endswith(
        f"(oauth2, …{access[-4:]})\nits secret is sent only to: {API_HOST}, {AUTH_HOST}\n"
    )
    code, out, _ = b3os(
        "connection",
        "add",
        PACK,
        "api-key",
        "--secret-stdin",
        "--param",
        "account=7",
        "--param",
        "region=us",
        stdin="short",
    )
    assert code == 0 and " api-key (api_key)\nits secret is sent only to: " in out

    code, out, _ = b3os("connection", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "ID",
        "PACK",
        "CONNECTION",
        "KIND",
        "HINT",
        "SENT",
        "TO",
        "UPDATED",
    ]
    assert [line.split()[2] for line in lines[1:]] == ["api-key", "login", "oauth", "token"]
    code, out, _ = b3os("connection", "list", "--json")
    items = json.loads(out)["items"]
    assert items[0]["params"] == {"account": 7, "region": "us"} and token not in out and password not in out

    code, out, err = b3os("connection", "add", PACK, "nope", "--secret-stdin", stdin=token)
    assert code == 1 and out == ""
    assert err == f"b3os connection add: {PACK} 1.0.0 has no connection 'nope' (its connections: {KEYS})\n"
    code, out, err = b3os("connection", "add", PACK, "oauth", "--secret-stdin", stdin=access)
    assert code == 1 and access not in err and "an oauth2 secret is a JSON object on stdin" in err
    code, out, err = b3os("connection", "add", PACK, "token", "--secret-stdin", stdin=token + "\x07")
    assert code == 1 and token not in err and "(secret holds a control character)" in err

    code, out, _ = b3os("connection", "remove", login)
    assert code == 0 and out == f"removed {login}\n"
    code, out, err = b3os("connection", "remove", login)
    assert (
        code == 1
        and err == f"b3os connection remove: Your organization has no connection {login}. (404 not_found)\n"
    )


def test_the_cli_never_takes_a_secret_from_argv(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _secret()
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    nowhere = ["--api-url", "http://127.0.0.1:9", "--api-key", "k"]
    for argv in (
        ["--secret", secret, "--secret-stdin"],
        [f"--secret={secret}", "--secret-stdin"],
        ["--token", secret],
        ["--password", secret],
    ):
        with pytest.raises(SystemExit) as exited:
            main(["connection", "add", PACK, "token", *argv, *nowhere])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert secret not in err and "a secret is never taken from the command line" in err
    with pytest.raises(SystemExit):
        main(["connection", "add", PACK, "token", "--api-key", "k"])
    assert "the following arguments are required: --secret-stdin" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["connection", "add", "--help"])
    help_text = capsys.readouterr().out
    assert (
        "--secret-stdin" in help_text and re.search(r"--(secret|token|password)(?!-stdin)", help_text) is None
    )
