"""API keys: shown once, stored as a hash, scoped, revocable, never visible across organizations."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from apitest import Org
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from api.accounts.organizations import new_id
from api.models import ApiKey


def test_a_created_key_is_shown_once_and_stored_only_as_a_hash(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org]
) -> None:
    owner = make_org()
    r = client.post(
        "/v1/keys",
        headers=owner.headers,
        json={"name": "ci", "scopes": ["actions:call"], "monthly_spend_cap_microusd": 5_000_000},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["key"].startswith("b3_") and len(body["key"]) == 43
    assert body["scopes"] == ["actions:call"] and body["monthly_spend_cap_microusd"] == 5_000_000
    listed = client.get("/v1/keys", headers=owner.headers).json()["keys"]
    assert {k["id"] for k in listed} == {owner.key_id, body["id"]}
    assert all("key" not in k and "key_hash" not in k for k in listed)
    with Session(app.state.engine) as session:
        row = session.exec(select(ApiKey).where(ApiKey.id == body["id"])).one()
        assert body["key"] not in (row.key_hash, row.prefix) and len(row.key_hash) == 64
    assert client.get("/v1/keys", headers={"Authorization": f"Bearer {body['key']}"}).status_code == 403


def test_a_revoked_key_stops_working_at_once(client: TestClient, make_org: Callable[..., Org]) -> None:
    owner = make_org()
    made = client.post("/v1/keys", headers=owner.headers, json={"scopes": ["keys:admin"]}).json()
    headers = {"Authorization": f"Bearer {made['key']}"}
    assert client.get("/v1/keys", headers=headers).status_code == 200
    r = client.delete(f"/v1/keys/{made['id']}", headers=owner.headers)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    r = client.get("/v1/keys", headers=headers)
    assert r.status_code == 401
    assert r.json() == {"error": {"code": "unauthorized", "message": "This API key was revoked."}}


def test_requests_without_a_valid_key_are_unauthorized(client: TestClient) -> None:
    r = client.get("/v1/keys")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert "Authorization: Bearer" in r.json()["error"]["message"]
    r = client.get(
        "/v1/keys", headers={"Authorization": "Bearer b3_notakeyatallnotakeyatallnotakeyatall1234"}
    )
    assert r.status_code == 401 and r.json()["error"]["message"] == "The API key is not valid."


def test_an_org_never_sees_or_revokes_another_orgs_keys(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    a, b = make_org(name="a"), make_org(name="b")
    assert [k["id"] for k in client.get("/v1/keys", headers=b.headers).json()["keys"]] == [b.key_id]
    r = client.delete(f"/v1/keys/{a.key_id}", headers=b.headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.get("/v1/keys", headers=a.headers).status_code == 200


def test_a_key_cannot_hand_out_scopes_it_does_not_hold(
    client: TestClient, make_org: Callable[..., Org], add_key: Callable[..., Org]
) -> None:
    owner = make_org(scopes=["*"])
    r = client.post("/v1/keys", headers=owner.headers, json={"scopes": ["actions:tools:publish"]})
    assert r.status_code == 403
    assert r.json()["error"]["message"] == (
        "A key cannot hand out the scope actions:tools:publish, which it does not hold itself."
    )
    admin = add_key(owner, ["keys:admin", "actions:call"])
    assert (
        client.post("/v1/keys", headers=admin.headers, json={"scopes": ["actions:call"]}).status_code == 201
    )
    r = client.post("/v1/keys", headers=admin.headers, json={"scopes": ["actions:*"]})
    assert r.status_code == 403 and "actions:*" in r.json()["error"]["message"]


def test_a_capped_key_cannot_create_a_key_with_a_higher_cap_or_none(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    owner = make_org(scopes=["*"])
    capped = client.post(
        "/v1/keys", headers=owner.headers, json={"scopes": ["*"], "monthly_spend_cap_microusd": 1}
    ).json()["key"]
    headers = {"Authorization": f"Bearer {capped}"}
    for asked, says in ((None, "no cap"), (2, "a cap of 2")):
        r = client.post(
            "/v1/keys", headers=headers, json={"scopes": ["*"], "monthly_spend_cap_microusd": asked}
        )
        assert r.status_code == 403
        error = r.json()["error"]
        assert error["field"] == "monthly_spend_cap_microusd"
        assert error["message"] == (
            f"A key with a monthly spend cap of 1 micro-USD cannot create a key with {says}: "
            "give it a cap of at most 1."
        )
    r = client.post("/v1/keys", headers=headers, json={"scopes": ["*"], "monthly_spend_cap_microusd": 1})
    assert r.status_code == 201 and r.json()["monthly_spend_cap_microusd"] == 1
    # an uncapped key gives any cap, or none
    r = client.post("/v1/keys", headers=owner.headers, json={"scopes": ["*"]})
    assert r.status_code == 201 and r.json()["monthly_spend_cap_microusd"] is None


def test_usage_and_earnings_need_their_scopes(client: TestClient, make_org: Callable[..., Org]) -> None:
    caller = make_org(scopes=["actions:call"], namespaces=["com.example.scoped"])
    for path, scope in (
        ("/v1/usage", "usage:read"),
        ("/v1/actions/publishers/com.example.scoped/earnings", "earnings:read"),
    ):
        r = client.get(path, headers=caller.headers)
        assert r.status_code == 403, r.text
        assert r.json()["error"]["message"] == f"This key lacks the scope {scope}."
        assert r.json()["error"]["missing_scope"] == scope
        reader = make_org(scopes=[scope], namespaces=[] if scope == "usage:read" else ["com.example.scoped2"])
        path = path.replace("scoped", "scoped2")
        assert client.get(path, headers=reader.headers).status_code == 200


def test_bad_key_requests_name_the_field(client: TestClient, make_org: Callable[..., Org]) -> None:
    owner = make_org()
    r = client.post("/v1/keys", headers=owner.headers, json={"scopes": ["actions:call"], "colour": "red"})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "code": "invalid_request",
        "message": "The field colour is not accepted here.",
        "field": "colour",
    }
    r = client.post("/v1/keys", headers=owner.headers, json={"scopes": ["not a scope"]})
    assert r.status_code == 400 and r.json()["error"]["field"] == "scopes"
    assert "'not a scope' is not a scope name" in r.json()["error"]["message"]
    r = client.post(
        "/v1/keys", headers=owner.headers, json={"scopes": ["actions:call"], "monthly_spend_cap_microusd": -1}
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "monthly_spend_cap_microusd"
    r = client.post(
        "/v1/keys", headers={**owner.headers, "Content-Type": "application/json"}, content=b"{nope"
    )
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "The request body is not valid JSON"
    )


def test_a_scope_b3os_does_not_grant_is_refused_naming_the_known_ones(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    owner = make_org()
    for scope in ("actions:cal", "billing:*", "routines:run:now"):
        r = client.post("/v1/keys", headers=owner.headers, json={"scopes": [scope]})
        assert r.status_code == 400 and r.json()["error"]["field"] == "scopes", r.text
        assert f"'{scope}' is not a scope b3os grants: use one of actions:write, actions:call" in r.text
    for scope in ("actions:*", "connections:read", "*"):
        assert client.post("/v1/keys", headers=owner.headers, json={"scopes": [scope]}).status_code == 201


def test_a_key_revokes_only_keys_whose_scopes_it_could_hand_out(
    client: TestClient, make_org: Callable[..., Org], add_key: Callable[..., Org]
) -> None:
    owner = make_org()  # "*" and actions:tools:publish: the only key that may publish tools
    admin = add_key(owner, ["keys:admin"])
    r = client.delete(f"/v1/keys/{owner.key_id}", headers=admin.headers)
    assert r.status_code == 403 and r.json()["error"]["field"] == "key_id"
    assert "could not hand out itself" in r.json()["error"]["message"]
    assert client.get("/v1/keys", headers=owner.headers).status_code == 200  # still working
    helper = add_key(owner, ["keys:admin"])
    assert client.delete(f"/v1/keys/{helper.key_id}", headers=admin.headers).status_code == 200


def test_the_signing_keys_of_a_namespace_need_the_publish_scope_to_be_listed(
    client: TestClient, make_org: Callable[..., Org], add_key: Callable[..., Org]
) -> None:
    owner = make_org(namespaces=["com.acme.tools"])
    caller = add_key(owner, ["actions:call"])
    r = client.get("/v1/actions/publishers/com.acme.tools/keys", headers=caller.headers)
    assert r.status_code == 403 and r.json()["error"]["missing_scope"] == "actions:tools:publish"
    assert client.get("/v1/actions/publishers/com.acme.tools/keys", headers=owner.headers).status_code == 200


def test_a_flood_of_bad_keys_meets_429s_while_a_good_key_keeps_working(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    good = make_org()
    assert client.get("/v1/keys", headers=good.headers).status_code == 200  # seen valid by this process
    bad = {"Authorization": "Bearer b3_not-a-key"}
    answers = [client.get("/v1/keys", headers=bad).status_code for _ in range(70)]
    assert answers[:60] == [401] * 60 and answers[60:] == [429] * 10
    refused = client.get("/v1/usage", headers=bad)
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 61
    assert refused.json()["error"]["code"] == "rate_limited"
    assert client.get("/v1/keys", headers=good.headers).status_code == 200


def test_a_flood_of_bad_keys_does_not_refuse_a_valid_key_seen_for_the_first_time(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    flooded = [client.get("/v1/keys", headers={"Authorization": "Bearer b3_not-a-key"}) for _ in range(61)]
    assert flooded[-1].status_code == 429
    # a valid key this process never saw is looked up, and works
    fresh = make_org()
    assert client.get("/v1/keys", headers=fresh.headers).status_code == 200
    # a key shaped like the api's but unknown is looked up too, and still refused 429 (Retry-After)
    shaped = {"Authorization": "Bearer b3_" + "A" * 40}
    refused = client.get("/v1/keys", headers=shaped)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1


def test_key_creation_is_limited_per_organization_and_hour(
    app: FastAPI, client: TestClient, make_org: Callable[..., Org]
) -> None:
    app.state.settings.keys_per_hour = 3  # the organization's own key counts: two more, then 429
    owner, other = make_org(), make_org()
    body = {"scopes": ["actions:call"]}
    made = [client.post("/v1/keys", headers=owner.headers, json=body) for _ in range(3)]
    assert [r.status_code for r in made] == [201, 201, 429]
    refused = made[2]
    assert refused.json()["error"]["code"] == "rate_limited" and refused.json()["error"]["limit"] == 3
    assert 3500 <= int(refused.headers["Retry-After"]) <= 3601
    assert "made 3 API keys in the last hour" in refused.json()["error"]["message"]
    assert client.post("/v1/keys", headers=other.headers, json=body).status_code == 201


def test_ids_are_the_kind_and_20_lowercase_alphanumerics_drawn_evenly() -> None:
    ids = [new_id("tcall") for _ in range(3_000)]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("tcall_") and len(i) == 26 for i in ids)
    alphabet = set("abcdefghijklmnopqrstuvwxyz0123456789")
    for position in (6, 15, 25):  # the first, a middle and the last character: each of the 36 turns up
        seen = Counter(i[position] for i in ids)
        assert set(seen) == alphabet
        assert min(seen.values()) > 3_000 / 36 / 3  # none far below its share of ~83
