"""The publisher list (operator only) and signing keys (the namespace's organization only)."""

from __future__ import annotations

from collections.abc import Callable

from apitest import NAMESPACE, Org
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from packs.signing import public_key_b64

PUBLIC = public_key_b64(Ed25519PrivateKey.generate())


def test_the_operator_gives_a_namespace_to_an_org_which_then_registers_keys(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    operator, tools = make_org(operator=True), make_org()
    r = client.put(
        f"/v1/admin/publishers/{NAMESPACE}", headers=operator.headers, json={"org_id": tools.org_id}
    )
    assert r.status_code == 200 and r.json()["org_id"] == tools.org_id
    listed = client.get("/v1/actions/publishers", headers=tools.headers).json()["publishers"]
    assert [p["namespace"] for p in listed] == [NAMESPACE]
    r = client.post(
        f"/v1/actions/publishers/{NAMESPACE}/keys",
        headers=tools.headers,
        json={"kid": f"{NAMESPACE}#k1", "public_key": PUBLIC},
    )
    assert r.status_code == 201 and r.json()["public_key"] == PUBLIC and r.json()["revoked_at"] is None
    keys = client.get(f"/v1/actions/publishers/{NAMESPACE}/keys", headers=tools.headers).json()["keys"]
    assert [k["kid"] for k in keys] == [f"{NAMESPACE}#k1"]


def test_only_the_operator_edits_the_publisher_list(client: TestClient, make_org: Callable[..., Org]) -> None:
    someone = make_org()
    r = client.put(
        f"/v1/admin/publishers/{NAMESPACE}", headers=someone.headers, json={"org_id": someone.org_id}
    )
    assert r.status_code == 403
    assert r.json()["error"]["message"].startswith("Only a key of the operator organization")
    operator = make_org(operator=True)
    r = client.put(
        "/v1/admin/publishers/Not_A_Namespace", headers=operator.headers, json={"org_id": someone.org_id}
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "namespace"
    r = client.put(f"/v1/admin/publishers/{NAMESPACE}", headers=operator.headers, json={"org_id": "org_nope"})
    assert r.status_code == 404 and r.json()["error"]["message"] == "There is no organization org_nope."


def test_another_orgs_namespace_and_keys_are_not_found(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    owner, other = make_org(namespaces=[NAMESPACE]), make_org()
    client.post(
        f"/v1/actions/publishers/{NAMESPACE}/keys",
        headers=owner.headers,
        json={"kid": f"{NAMESPACE}#k1", "public_key": PUBLIC},
    ).raise_for_status()
    for r in (
        client.get(f"/v1/actions/publishers/{NAMESPACE}/keys", headers=other.headers),
        client.post(
            f"/v1/actions/publishers/{NAMESPACE}/keys",
            headers=other.headers,
            json={"kid": f"{NAMESPACE}#k2", "public_key": PUBLIC},
        ),
        client.delete(f"/v1/actions/publishers/{NAMESPACE}/keys/{NAMESPACE}%23k1", headers=other.headers),
    ):
        assert r.status_code == 404
        assert r.json()["error"]["message"] == f"Your organization has no publisher namespace {NAMESPACE}."
    assert client.get("/v1/actions/publishers", headers=other.headers).json() == {"publishers": []}


def test_signing_key_registration_refuses_bad_kids_and_keys(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    owner = make_org(namespaces=[NAMESPACE, "org.other"])
    url = f"/v1/actions/publishers/{NAMESPACE}/keys"
    r = client.post(url, headers=owner.headers, json={"kid": "org.other#k", "public_key": PUBLIC})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"The kid 'org.other#k' is not of the namespace {NAMESPACE}."
    r = client.post(url, headers=owner.headers, json={"kid": "no-hash", "public_key": PUBLIC})
    assert r.status_code == 400 and r.json()["error"]["field"] == "kid"
    r = client.post(url, headers=owner.headers, json={"kid": f"{NAMESPACE}#k", "public_key": "c2hvcnQ="})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "The field public_key is not the standard base64 of a raw 32-byte Ed25519 public key."
    )
    ok = client.post(url, headers=owner.headers, json={"kid": f"{NAMESPACE}#k", "public_key": PUBLIC})
    assert ok.status_code == 201
    same = client.post(url, headers=owner.headers, json={"kid": f"{NAMESPACE}#k", "public_key": PUBLIC})
    assert same.status_code == 201 and same.json()["created_at"] == ok.json()["created_at"]
    other = public_key_b64(Ed25519PrivateKey.generate())
    r = client.post(url, headers=owner.headers, json={"kid": f"{NAMESPACE}#k", "public_key": other})
    assert r.status_code == 409 and r.json()["error"]["message"] == (
        f"The kid {NAMESPACE}#k is already registered; a kid names one key forever."
    )
    again = client.post(url, headers=owner.headers, json={"kid": f"{NAMESPACE}#k2", "public_key": PUBLIC})
    assert again.status_code == 409 and again.json()["error"]["field"] == "public_key"
    assert again.json()["error"]["message"] == (
        f"This public key is already registered as {NAMESPACE}#k; a key has one kid: "
        "generate a new key pair for a new kid."
    )  # so revoking that kid revokes the key: no second kid keeps it alive
    other_ns = "/v1/actions/publishers/org.other/keys"
    r = client.post(other_ns, headers=owner.headers, json={"kid": "org.other#k", "public_key": PUBLIC})
    assert r.status_code == 409 and r.json()["error"]["field"] == "public_key"


def test_registering_signing_keys_needs_the_publish_scope_by_name(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    wildcard = make_org(scopes=["*"], namespaces=[NAMESPACE])
    r = client.post(
        f"/v1/actions/publishers/{NAMESPACE}/keys",
        headers=wildcard.headers,
        json={"kid": f"{NAMESPACE}#k", "public_key": PUBLIC},
    )
    assert r.status_code == 403 and r.json()["error"]["missing_scope"] == "actions:tools:publish"
