"""Registry blobs: stored only under their sha256, at most the limit, idempotent, per organization."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from apitest import Org
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api.config import Settings
from api.main import create_app

PUBLISH = ["*", "actions:tools:publish"]


def _name(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_blob_is_stored_once_under_its_sha256_and_read_back(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org], node_headers: dict[str, str]
) -> None:
    org = make_org(scopes=PUBLISH)
    data = b"archive bytes\n" * 1000
    url = f"/v1/actions/registry/blobs/{_name(data)}"
    assert client.head(url, headers=org.headers).status_code == 404
    r = client.put(url, headers=org.headers, content=data)
    assert r.status_code == 201 and r.json() == {"digest": _name(data), "bytes": len(data)}
    again = client.put(url, headers=org.headers, content=data)
    assert again.status_code == 200 and again.json()["bytes"] == len(data)
    head = client.head(url, headers=org.headers)
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    assert client.get(url, headers=org.headers).content == data
    # a node reads only what a published pack version holds (tests/api/test_api_publish.py): not this
    for method in (client.get, client.head):
        assert method(url, headers=node_headers).status_code == 404
    stored = list((app.state.settings.resolved_blob_dir() / "sha256").rglob("*"))
    assert [p.name for p in stored if p.is_file()] == [hashlib.sha256(data).hexdigest()]


def test_bytes_that_do_not_hash_to_the_name_are_refused_and_not_kept(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org]
) -> None:
    org = make_org(scopes=PUBLISH)
    name = _name(b"expected")
    r = client.put(f"/v1/actions/registry/blobs/{name}", headers=org.headers, content=b"something else")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["reason"] == "digest_mismatch"
    assert err["message"] == (
        f"The uploaded bytes hash to {_name(b'something else')}, not to the blob's name {name}."
    )
    assert client.head(f"/v1/actions/registry/blobs/{name}", headers=org.headers).status_code == 404
    assert not any(p.is_file() for p in app.state.settings.resolved_blob_dir().rglob("*"))


def test_a_blob_over_the_limit_is_refused_without_buffering_it(
    client: TestClient, app: FastAPI, make_org: Callable[..., Org]
) -> None:
    org = make_org(scopes=PUBLISH)
    app.state.settings.max_blob_bytes = 1000
    data = b"x" * 1001
    url = f"/v1/actions/registry/blobs/{_name(data)}"
    r = client.put(url, headers=org.headers, content=data)
    assert r.status_code == 413
    assert r.json()["error"] == {
        "code": "payload_too_large",
        "message": "The blob is larger than the limit of 1000 bytes.",
        "limit_bytes": 1000,
    }

    def chunks() -> Iterator[bytes]:  # no Content-Length: the stream is cut off while it is read
        for _ in range(11):
            yield b"x" * 100

    r = client.put(url, headers=org.headers, content=chunks())
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert not any(p.is_file() for p in app.state.settings.resolved_blob_dir().rglob("*"))


def test_a_bad_blob_name_is_refused_with_a_sentence(client: TestClient, make_org: Callable[..., Org]) -> None:
    org = make_org(scopes=PUBLISH)
    r = client.put("/v1/actions/registry/blobs/md5:abc", headers=org.headers, content=b"x")
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "The blob name 'md5:abc' is not sha256:<64 lowercase hex digits>."


def test_uploading_needs_actions_write_only(client: TestClient, make_org: Callable[..., Org]) -> None:
    # Publishing a tool pack needs actions:tools:publish by name; uploading its files does not.
    url = f"/v1/actions/registry/blobs/{_name(b'x')}"
    caller = make_org(scopes=["actions:call"])
    r = client.put(url, headers=caller.headers, content=b"x")
    assert r.status_code == 403 and r.json()["error"]["missing_scope"] == "actions:write"
    writer = make_org(scopes=["actions:write"])
    assert client.put(url, headers=writer.headers, content=b"x").status_code == 201


def test_another_org_cannot_see_or_read_a_blob_it_did_not_upload(
    client: TestClient, make_org: Callable[..., Org]
) -> None:
    a, b = make_org(scopes=PUBLISH), make_org(scopes=PUBLISH)
    data = b"private until published"
    url = f"/v1/actions/registry/blobs/{_name(data)}"
    assert client.put(url, headers=a.headers, content=data).status_code == 201
    assert client.head(url, headers=b.headers).status_code == 404
    r = client.get(url, headers=b.headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.put(url, headers=b.headers, content=data).status_code == 201
    assert client.get(url, headers=b.headers).content == data


def test_with_the_database_store_two_apis_with_separate_disks_serve_one_blob(
    migrated_database_url: str,
    tmp_path: Path,
    make_org: Callable[..., Org],
) -> None:
    apps = [
        create_app(
            Settings(data_dir=tmp_path / name, database_url=migrated_database_url, blob_store="database")
        )
        for name in ("a", "b")
    ]
    try:
        with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
            org = make_org(scopes=PUBLISH)
            data = bytes(range(256)) * (5 * 4096 + 7)  # over 5 MiB: read back in several slices
            url = f"/v1/actions/registry/blobs/{_name(data)}"
            assert a.put(url, headers=org.headers, content=data).status_code == 201
            assert b.put(url, headers=org.headers, content=data).status_code == 200
            head = b.head(url, headers=org.headers)
            assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
            got = b.get(url, headers=org.headers)
            assert got.status_code == 200 and got.content == data
            assert got.headers["content-length"] == str(len(data))
            wrong = _name(b"expected")
            r = b.put(f"/v1/actions/registry/blobs/{wrong}", headers=org.headers, content=b"other")
            assert r.status_code == 400 and r.json()["error"]["reason"] == "digest_mismatch"
            assert b.head(f"/v1/actions/registry/blobs/{wrong}", headers=org.headers).status_code == 404
    finally:
        for app in apps:
            app.state.engine.dispose()
    assert not any(p.is_file() for p in tmp_path.rglob("*") if "blobs" in p.parts), "a blob went to disk"


def test_the_database_store_refuses_a_blob_limit_over_64_mib(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="max_blob_bytes is 67108865, more than the 67108864 bytes"):
        Settings(data_dir=tmp_path, blob_store="database", max_blob_bytes=64 * 1024 * 1024 + 1)
