"""Publishing: the echo tool end to end, and one test per refusal rule."""

from __future__ import annotations

import argparse
import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apitest import KID, NAMESPACE, REPO, Built, Org, build_echo, register_key, upload
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.errors import Conflict
from api.registry.publishing import publish
from b3os import B3OS
from cli._http import CliError
from cli.pack_publish import publish_command
from cli.tool_publish import publish_dir
from packs.build import build_pack
from packs.hashing import BundleFile
from packs.signing import public_key_b64, sign_manifest

ECHO_PINS = [f"{NAMESPACE}/echo/{a}@1.0.0" for a in ("noop", "echo", "fail")]


GET_ISSUE_FIXTURE = (
    '{"action": "get-issue", "input": {"owner": "o", "repo": "r", "number": 1}, "output": {"number": 1, '
    '"title": "a bug", "state": "open", "url": "https://github.com/o/r/issues/1", "author": "ann", '
    '"labels": []}}\n'
)
"""A fixture of get-issue that passes check 41 (a fixture fits its action's schemas)."""


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def publisher(client: TestClient, make_org: Callable[..., Org], key: Ed25519PrivateKey) -> Org:
    org = make_org(namespaces=[NAMESPACE])
    register_key(client, org, key)
    return org


@pytest.fixture
def echo(tmp_path: Path, key: Ed25519PrivateKey) -> Built:
    return build_echo(tmp_path, key)


def _publish(client: TestClient, org: Org, built: Built, records: list[dict[str, Any]] | None = None) -> Any:
    return client.post(
        "/v1/actions/packs",
        headers=org.headers,
        json={"manifest": built.manifest, "files": records or built.records},
    )


def _refusal(r: Any, status: int, reason: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["reason"] == reason, error
    return error


def test_the_echo_tool_publishes_and_reads_back_everywhere(
    client: TestClient, publisher: Org, echo: Built, key: Ed25519PrivateKey, node_headers: dict[str, str]
) -> None:
    said: list[str] = []
    api = B3OS(str(client.base_url), publisher.key, http_client=client)
    answer = publish_dir(api, echo.root, say=said.append)
    assert said == [f"{p}: uploaded {len(d)} bytes" for p, d in sorted(echo.files.items())]
    assert [a["ref"] for a in answer["actions"]] == ECHO_PINS
    assert answer["content_hash"] == echo.manifest["signature"]["hash"]
    base = f"/v1/actions/packs/{NAMESPACE}/echo"
    pack = client.get(base, headers=publisher.headers).json()
    assert pack["version"] == "1.0.0" and pack["kid"] == KID and pack["title"] == "Echo"
    versions = client.get(f"{base}/versions", headers=publisher.headers).json()["versions"]
    assert [v["version"] for v in versions] == ["1.0.0"]
    assert client.get(f"{base}/versions/1.0.0/manifest", headers=publisher.headers).json() == echo.manifest
    tools = client.get(f"{base}/tools", headers=publisher.headers).json()["tools"]
    assert [t["name"] for t in tools] == ["echo__noop", "echo__echo", "echo__fail"]
    echo_tool = tools[1]
    assert echo_tool["description"] == echo.manifest["actions"][1]["description"]
    assert echo_tool["inputSchema"]["required"] == ["text"]
    # Publishing again uploads nothing new and is refused: versions are immutable.
    said.clear()
    with pytest.raises(CliError) as refused:
        publish_dir(api, echo.root, say=said.append)
    assert all(line.endswith("already in the registry") for line in said) and len(said) == len(echo.files)
    assert str(refused.value) == (
        f"The version 1.0.0 of {NAMESPACE}/echo is already published: versions are immutable, "
        "publish a new version. (409 conflict)"
    )
    # A node sees it in the feed with the public key, and reads every blob.
    node = node_headers
    feed = client.get("/v1/nodes/registry", params={"after": 0}, headers=node).json()
    assert feed["cursor"] == 1 and [(v["pack"], v["version"]) for v in feed["versions"]] == [
        (f"{NAMESPACE}/echo", "1.0.0")
    ]
    item = feed["versions"][0]
    assert item["files"] == echo.records and item["manifest"] == echo.manifest
    from packs.signing import verify_manifest

    assert item["public_key"] == public_key_b64(key)
    files = [BundleFile.from_dict(f) for f in item["files"]]
    assert verify_manifest(item["manifest"], files, item["public_key"]) == item["content_hash"]
    for f in item["files"]:
        got = client.get(f"/v1/actions/registry/blobs/sha256:{f['sha256']}", headers=node)
        assert got.content == echo.files[f["path"]]
    assert client.get("/v1/nodes/registry", params={"after": 1}, headers=node).json() == {
        "versions": [],
        "cursor": 1,
    }


def test_the_same_version_again_is_refused_even_with_identical_content(
    client: TestClient, publisher: Org, echo: Built
) -> None:
    upload(client, publisher, echo.files)
    assert _publish(client, publisher, echo).status_code == 201
    error = _refusal(_publish(client, publisher, echo), 409, "version_exists")
    assert error["code"] == "conflict"


@pytest.mark.parametrize(
    ("scopes", "missing"),
    [
        (["*"], "actions:tools:publish"),
        (["actions:*"], "actions:tools:publish"),
        (["actions:tools:publish"], "actions:write"),
    ],
)
def test_publishing_needs_the_publish_scope_by_name_and_actions_write(
    client: TestClient,
    publisher: Org,
    add_key: Callable[..., Org],
    echo: Built,
    scopes: list[str],
    missing: str,
) -> None:
    upload(client, publisher, echo.files)
    weak = add_key(publisher, scopes)
    r = _publish(client, weak, echo)
    assert r.status_code == 403 and r.json()["error"]["missing_scope"] == missing
    assert missing in r.json()["error"]["message"]


def test_actions_wildcard_with_the_publish_scope_by_name_publishes(
    client: TestClient, publisher: Org, add_key: Callable[..., Org], echo: Built
) -> None:
    upload(client, publisher, echo.files)
    assert (
        _publish(client, add_key(publisher, ["actions:*", "actions:tools:publish"]), echo).status_code == 201
    )


def test_a_namespace_of_another_org_is_refused(
    client: TestClient, make_org: Callable[..., Org], publisher: Org, echo: Built
) -> None:
    other = make_org()
    upload(client, other, echo.files)
    error = _refusal(_publish(client, other, echo), 403, "namespace")
    assert error["message"] == f"The namespace {NAMESPACE} is not your organization's in the publisher list."


def test_an_unregistered_kid_is_refused(
    client: TestClient, publisher: Org, tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    built = build_echo(tmp_path, key, kid=f"{NAMESPACE}#unknown")
    upload(client, publisher, built.files)
    error = _refusal(_publish(client, publisher, built), 403, "kid_unknown")
    assert error["message"].startswith(f"The kid {NAMESPACE}#unknown is not registered for the namespace")


def test_a_revoked_kid_stops_new_publishes_but_not_published_versions(
    client: TestClient, publisher: Org, tmp_path: Path, key: Ed25519PrivateKey, echo: Built
) -> None:
    upload(client, publisher, echo.files)
    assert _publish(client, publisher, echo).status_code == 201
    kid = KID.replace("#", "%23")
    r = client.delete(f"/v1/actions/publishers/{NAMESPACE}/keys/{kid}", headers=publisher.headers)
    assert r.status_code == 200 and r.json()["revoked_at"]
    newer = build_echo(tmp_path, key, version="1.0.1")
    upload(client, publisher, newer.files)
    error = _refusal(_publish(client, publisher, newer), 403, "kid_revoked")
    assert error["message"].startswith(f"The kid {KID} was revoked on ")
    assert (
        client.get(f"/v1/actions/packs/{NAMESPACE}/echo", headers=publisher.headers).json()["version"]
        == "1.0.0"
    )


def test_every_failing_publish_check_is_listed(client: TestClient, publisher: Org, echo: Built) -> None:
    upload(client, publisher, echo.files)
    echo.manifest["tool"]["size"] = {"vcpu": 2, "memoryMb": 512}
    echo.manifest["actions"][0]["execution"] = {"timeoutMs": 5}
    error = _refusal(_publish(client, publisher, echo), 400, "checks")
    assert {(v["check"], v["field"]) for v in error["violations"]} >= {(14, "tool.size")}
    assert len(error["violations"]) == 2
    assert error["message"].startswith("The manifest fails 2 publish checks: check 14: ")


def test_a_fixture_its_action_refuses_is_refused_at_publish_naming_the_file_and_field(
    client: TestClient, publisher: Org, echo: Built, key: Ed25519PrivateKey
) -> None:
    # signed over its files as a build would, but a build refuses it: published by hand
    files = {
        **echo.files,
        "fixtures/echo-seven.json": b'{"action": "echo", "input": {"text": "7"}, "output": {"text": 7}}',
    }
    unsigned = {k: v for k, v in echo.manifest.items() if k != "signature"}
    signed = sign_manifest(unsigned, [BundleFile.of(p, d) for p, d in sorted(files.items())], key, KID)
    upload(client, publisher, files)
    error = _refusal(_publish(client, publisher, Built(echo.root, signed, files)), 400, "checks")
    message = (
        "check 41: fixtures/echo-seven.json:output.text 7 is not accepted: the outputSchema of action "
        "\"echo\" refuses it: 7 is not of type 'string'"
    )
    assert error["violations"] == [
        {"check": 41, "field": "fixtures/echo-seven.json:output.text", "message": message}
    ]
    assert error["message"] == f"The manifest fails 1 publish check: {message}"
    assert client.get(f"/v1/actions/packs/{NAMESPACE}/echo", headers=publisher.headers).status_code == 404


def test_a_manifest_changed_after_signing_fails_the_content_hash(
    client: TestClient, publisher: Org, echo: Built
) -> None:
    upload(client, publisher, echo.files)
    echo.manifest["title"] = "Echo, edited"
    error = _refusal(_publish(client, publisher, echo), 400, "content_hash")
    assert error["message"].startswith("The content hash does not match: content hash sha256:")


def test_a_signature_by_another_key_does_not_verify(
    client: TestClient, publisher: Org, tmp_path: Path
) -> None:
    built = build_echo(tmp_path, Ed25519PrivateKey.generate())
    upload(client, publisher, built.files)
    error = _refusal(_publish(client, publisher, built), 400, "signature")
    assert error["message"].startswith("The signature does not verify: signature.value does not verify")


def test_a_file_not_uploaded_is_refused_naming_it(client: TestClient, publisher: Org, echo: Built) -> None:
    upload(client, publisher, {p: d for p, d in echo.files.items() if p != "NOTICES.md"})
    error = _refusal(_publish(client, publisher, echo), 400, "blob_missing")
    assert error["path"] == "NOTICES.md" and error["message"].startswith("The file NOTICES.md (sha256:")


def test_a_file_declared_with_other_bytes_is_refused(client: TestClient, publisher: Org, echo: Built) -> None:
    upload(client, publisher, echo.files)
    records = [dict(r, bytes=r["bytes"] + 1) if r["path"] == "NOTICES.md" else r for r in echo.records]
    error = _refusal(_publish(client, publisher, echo, records), 400, "blob_mismatch")
    notices = BundleFile.of("NOTICES.md", echo.files["NOTICES.md"])
    assert error["message"] == (
        f"The file NOTICES.md is declared with {notices.bytes + 1} bytes "
        f"but its blob sha256:{notices.sha256} has {notices.bytes}."
    )


def test_an_archive_other_than_the_manifest_declares_is_refused(
    client: TestClient, publisher: Org, echo: Built
) -> None:
    other = b"not the archive the manifest declares"
    files = {**echo.files, "tool.tar": other}
    upload(client, publisher, files)
    records = [BundleFile.of(p, d).to_dict() for p, d in sorted(files.items())]
    error = _refusal(_publish(client, publisher, echo, records), 400, "archive")
    assert "tool.tar has sha256" in error["message"]


def test_concurrent_publishes_of_one_version_have_exactly_one_winner(
    app: FastAPI, client: TestClient, publisher: Org, echo: Built
) -> None:
    upload(client, publisher, echo.files)
    files = [BundleFile.of(p, d) for p, d in sorted(echo.files.items())]
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def attempt() -> None:
        with Session(app.state.engine, expire_on_commit=False) as session:
            barrier.wait()
            try:
                publish(
                    session,
                    blobs=app.state.blobs,
                    org_id=publisher.org_id,
                    key_id=publisher.key_id,
                    manifest=echo.manifest,
                    violations=[],
                    files=files,
                )
                outcomes.append("won")
            except Conflict:
                outcomes.append("conflict")

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 5 + ["won"]


def test_the_newest_version_is_by_semver_and_refs_resolve(
    app: FastAPI, client: TestClient, publisher: Org, tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    for version in ("1.2.0", "1.10.0", "1.9.3", "0.9.0"):
        built = build_echo(tmp_path, key, version=version)
        upload(client, publisher, built.files)
        assert _publish(client, publisher, built).status_code == 201
    base = f"/v1/actions/packs/{NAMESPACE}/echo"
    pack = client.get(base, headers=publisher.headers).json()
    assert pack["version"] == "1.10.0" and pack["actions"][1]["ref"] == f"{NAMESPACE}/echo/echo@1.10.0"
    listed = client.get("/v1/actions/packs", headers=publisher.headers).json()["packs"]
    assert [p["version"] for p in listed if p["pack"] == f"{NAMESPACE}/echo"] == ["1.10.0"]
    versions = client.get(f"{base}/versions", headers=publisher.headers).json()["versions"]
    assert [v["version"] for v in versions] == ["1.10.0", "1.9.3", "1.2.0", "0.9.0"]
    tools = client.get(f"{base}/tools", params={"version": "0.9.0"}, headers=publisher.headers).json()
    assert tools["version"] == "0.9.0"
    for ref, expected in [("echo@1", "1.10.0"), ("echo@0", "0.9.0"), ("echo@1.2.0", "1.2.0")]:
        r = client.get(
            "/v1/actions/resolve", params={"ref": f"{NAMESPACE}/echo/{ref}"}, headers=publisher.headers
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["version"], body["pin"], body["kind"]) == (
            expected,
            f"{NAMESPACE}/echo/echo@{expected}",
            "vm",
        )
        assert body["action"]["key"] == "echo" and body["action"]["inputSchema"]["required"] == ["text"]
    r = client.get(
        "/v1/actions/resolve", params={"ref": f"{NAMESPACE}/echo/echo@2"}, headers=publisher.headers
    )
    assert r.status_code == 404 and r.json()["error"]["missing"] == "version"
    assert r.json()["error"]["message"] == (
        f"{NAMESPACE}/echo/echo@2: {NAMESPACE}/echo has no version 2.x.y "
        "(versions: 0.9.0, 1.2.0, 1.9.3, 1.10.0)"
    )
    r = client.get(
        "/v1/actions/resolve", params={"ref": f"{NAMESPACE}/echo/shout@1"}, headers=publisher.headers
    )
    assert r.status_code == 404 and r.json()["error"]["missing"] == "action"
    r = client.get("/v1/actions/resolve", params={"ref": "not a ref"}, headers=publisher.headers)
    assert r.status_code == 400 and r.json()["error"]["field"] == "ref"
    r = client.get(f"{base}/versions/3.0.0/manifest", headers=publisher.headers)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == f"There is no version 3.0.0 of the pack {NAMESPACE}/echo."
    r = client.get(f"/v1/actions/packs/{NAMESPACE}/nope", headers=publisher.headers)
    assert (
        r.status_code == 404
        and r.json()["error"]["message"] == f"There is no pack {NAMESPACE}/nope in the registry."
    )


def test_a_blob_damaged_on_disk_is_refused(
    app: FastAPI, client: TestClient, publisher: Org, echo: Built
) -> None:
    upload(client, publisher, echo.files)
    notices = BundleFile.of("NOTICES.md", echo.files["NOTICES.md"])
    path = app.state.blobs.path(notices.sha256)
    path.write_bytes(b"x" * notices.bytes)
    error = _refusal(_publish(client, publisher, echo), 400, "blob_mismatch")
    assert error["message"] == (
        f"The stored blob sha256:{notices.sha256} of the file NOTICES.md no longer matches its sha256: "
        "upload it again."
    )


# --- declarative packs: actions:write is enough; a tool pack still needs actions:tools:publish --------------

GITHUB = REPO / "examples" / "packs" / "github"
IO_KID = "io.b3os#test"


@pytest.fixture
def io_publisher(client: TestClient, make_org: Callable[..., Org], key: Ed25519PrivateKey) -> Org:
    """An organization that owns io.b3os, with IO_KID registered (by its owner key)."""
    org = make_org(namespaces=["io.b3os"])
    r = client.post(
        "/v1/actions/publishers/io.b3os/keys",
        headers=org.headers,
        json={"kid": IO_KID, "public_key": public_key_b64(key)},
    )
    assert r.status_code == 201, r.text
    return org


@pytest.fixture
def github(tmp_path: Path, key: Ed25519PrivateKey) -> Path:
    """The github example with a NOTICES.md and a fixture, built and signed into its own directory."""
    src = tmp_path / "github-src"
    shutil.copytree(GITHUB, src)
    (src / "NOTICES.md").write_text("GitHub is a trademark of GitHub, Inc.\n")
    (src / "fixtures").mkdir()
    (src / "fixtures" / "get-issue.json").write_text(GET_ISSUE_FIXTURE)
    build_pack(src, kid=IO_KID, private_key=key, out_dir=tmp_path / "github")
    return tmp_path / "github"


def test_pack_publish_of_a_declarative_pack_needs_actions_write_only_and_prints_the_pins(
    client: TestClient,
    io_publisher: Org,
    add_key: Callable[..., Org],
    github: Path,
    capsys: pytest.CaptureFixture[str],
    node_headers: dict[str, str],
) -> None:
    writer = add_key(io_publisher, ["actions:write"])
    api = B3OS(str(client.base_url), writer.key, http_client=client)
    assert publish_command(argparse.Namespace(dir=github), "b3os pack publish", client=api) == 0
    out = capsys.readouterr().out.splitlines()
    manifest = json.loads((github / "b3pack.json").read_text())
    assert out == [
        f"NOTICES.md: uploaded {(github / 'NOTICES.md').stat().st_size} bytes",
        f"fixtures/get-issue.json: uploaded {(github / 'fixtures' / 'get-issue.json').stat().st_size} bytes",
        f"js/issues.js: uploaded {(github / 'js' / 'issues.js').stat().st_size} bytes",
        f"js/links.js: uploaded {(github / 'js' / 'links.js').stat().st_size} bytes",
        f"published io.b3os/github@1.0.0 ({manifest['signature']['hash']})",
        "io.b3os/github/get-issue@1.0.0",
        "io.b3os/github/create-issue@1.0.0",
        "io.b3os/github/list-open-issues@1.0.0",
    ]
    base = "/v1/actions/packs/io.b3os/github"
    assert client.get(f"{base}/versions/1.0.0/manifest", headers=writer.headers).json() == manifest
    # A node's feed carries it too; the node leaves it alone (no tool section: tests/node/test_sync.py).
    feed = client.get("/v1/nodes/registry", params={"after": 0}, headers=node_headers)
    assert [v["pack"] for v in feed.json()["versions"]] == ["io.b3os/github"]


def test_a_declarative_pack_without_actions_write_is_refused(
    client: TestClient, io_publisher: Org, add_key: Callable[..., Org], github: Path
) -> None:
    caller = add_key(io_publisher, ["actions:call"])
    api = B3OS(str(client.base_url), caller.key, http_client=client)
    with pytest.raises(CliError) as refused:
        publish_dir(api, github, say=lambda _: None)
    assert str(refused.value).startswith("This key lacks the scope actions:write.")


def test_a_tool_pack_with_actions_write_only_is_refused_naming_the_publish_scope(
    client: TestClient, publisher: Org, add_key: Callable[..., Org], echo: Built
) -> None:
    writer = add_key(publisher, ["actions:write"])
    upload(client, writer, echo.files)  # uploading the files needs actions:write only
    r = _publish(client, writer, echo)
    assert r.status_code == 403 and r.json()["error"]["missing_scope"] == "actions:tools:publish"
    assert r.json()["error"]["message"] == (
        "This key lacks the scope actions:tools:publish, which must be held by name (* and actions:* do not "
        "grant it)."
    )


def test_a_declarative_pack_in_another_orgs_namespace_is_refused(
    client: TestClient, io_publisher: Org, make_org: Callable[..., Org], github: Path
) -> None:
    other = make_org(scopes=["actions:write"])
    api = B3OS(str(client.base_url), other.key, http_client=client)
    with pytest.raises(CliError) as refused:
        publish_dir(api, github, say=lambda _: None)
    assert str(refused.value).startswith(
        "The namespace io.b3os is not your organization's in the publisher list: an operator gives it to "
        "your organization with `b3os publisher add io.b3os --org <your organization id>`"
    )  # the command, where the api's sentence stops
