"""The node seam: heartbeat registration and refresh, each node's own credential, the URLs a heartbeat may
name, live nodes for placement; `b3os node credential` issue, list and revoke."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from apitest import Org
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.accounts import node_credentials
from api.config import Settings
from api.main import create_app
from api.nodes import live_nodes
from api.rawsql import Reads
from cli.main import main

IssueNode = Callable[[str], dict[str, str]]


def _beat(node_id: str, free: int, installed: list[str] | None = None, url: str = "") -> dict[str, object]:
    return {
        "node_id": node_id,
        "url": url or f"http://127.0.0.1:9{free}00",
        "slots_total": 8,
        "slots_free": free,
        "installed": installed or [],
    }


def test_heartbeats_register_and_refresh_nodes_for_placement(
    client: TestClient, app: FastAPI, issue_node: IssueNode
) -> None:
    n1, n2 = issue_node("n1"), issue_node("n2")
    r = client.post("/v1/nodes/heartbeat", headers=n1, json=_beat("n1", 3))
    assert r.status_code == 200 and r.json()["slots_free"] == 3
    client.post("/v1/nodes/heartbeat", headers=n2, json=_beat("n2", 7)).raise_for_status()
    r = client.post("/v1/nodes/heartbeat", headers=n1, json=_beat("n1", 8, ["com.example.tools/echo@1.0.0"]))
    assert r.json()["installed"] == ["com.example.tools/echo@1.0.0"]
    with Reads(app.state.engine) as reads:
        nodes = live_nodes(reads)
        assert [(n.node_id, n.slots_free) for n in nodes] == [("n1", 8), ("n2", 7)]
        assert nodes[0].url == "http://127.0.0.1:9800"
        assert nodes[0].installed == ["com.example.tools/echo@1.0.0"]
        assert live_nodes(reads, max_age_s=-1) == []


def test_the_node_seam_takes_only_a_node_credential(
    client: TestClient, make_org: Callable[..., Org], issue_node: IssueNode
) -> None:
    org = make_org()
    issue_node("n1")
    forged = "b3n_" + "A" * 40
    for headers in (
        org.headers,
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {forged}"},
        {},
    ):
        r = client.post("/v1/nodes/heartbeat", headers=headers, json=_beat("n1", 1))
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        assert client.get("/v1/nodes/registry", headers=headers).status_code == 401
    r = client.post("/v1/nodes/heartbeat", headers={"Authorization": f"Bearer {forged}"}, json=_beat("n1", 1))
    assert r.json()["error"]["message"] == (
        "The node credential is not valid (issue one with b3os node credential issue)."
    )


def test_a_heartbeat_for_another_node_is_403_and_changes_nothing(
    client: TestClient, app: FastAPI, issue_node: IssueNode
) -> None:
    victim, evil = issue_node("victim"), issue_node("evil-node")
    client.post("/v1/nodes/heartbeat", headers=victim, json=_beat("victim", 8)).raise_for_status()
    r = client.post("/v1/nodes/heartbeat", headers=evil, json=_beat("victim", 8, url="http://10.9.9.9:80"))
    assert r.status_code == 403
    assert r.json()["error"] == {
        "code": "forbidden",
        "message": "This credential is node evil-node's; it cannot speak for node victim.",
        "field": "node_id",
        "value": "victim",
    }
    with Reads(app.state.engine) as reads:
        assert [(n.node_id, n.url) for n in live_nodes(reads)] == [("victim", "http://127.0.0.1:9800")]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("gopher://127.0.0.1:70/", "a node is reached over http or https only"),
        ("file:///etc/passwd", "a node is reached over http or https only"),
        ("http://user:pw@127.0.0.1:8710", "it carries a user or password"),
        ("http://127.0.0.1:8710/elsewhere", "a node URL is scheme, host and port only"),
        ("http://127.0.0.1:8710?x=1", "a node URL is scheme, host and port only"),
        ("http://8.8.8.8:8710", "8.8.8.8 is 8.8.8.8, outside the node networks"),
        ("http://[::ffff:8.8.8.8]:8710", "::ffff:8.8.8.8 is 8.8.8.8, outside the node networks"),
        ("http://169.254.169.254", "169.254.169.254 is 169.254.169.254, outside the node networks"),
        ("http://no-such-host.invalid:8710", "the host no-such-host.invalid does not resolve"),
        ("http://127.0.0.1:99999", "it is not a URL"),
    ],
)
def test_a_heartbeat_url_that_is_not_http_on_an_allowed_network_is_400_naming_it(
    client: TestClient, app: FastAPI, issue_node: IssueNode, url: str, why: str
) -> None:
    r = client.post("/v1/nodes/heartbeat", headers=issue_node("n1"), json=_beat("n1", 8, url=url))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"], error["value"]) == ("invalid_request", "url", url)
    assert error["message"].startswith(f"The node url {url!r} is refused: {why}")
    with Reads(app.state.engine) as reads:
        assert live_nodes(reads) == []


def test_the_node_networks_are_the_operators_choice(tmp_path: object, database_url: str) -> None:
    settings = Settings(data_dir=tmp_path / "state", database_url=database_url, node_networks="10.0.0.0/8")  # type: ignore[operator]
    app = create_app(settings)
    try:
        with TestClient(app) as client:
            with Session(app.state.engine) as session:
                _, secret = node_credentials.issue_credential(session, node_id="n1")
                session.commit()
            headers = {"Authorization": f"Bearer {secret}"}
            r = client.post(
                "/v1/nodes/heartbeat", headers=headers, json=_beat("n1", 1, url="http://127.0.0.1:1")
            )
            assert (
                r.status_code == 400
                and "outside the node networks (10.0.0.0/8;" in r.json()["error"]["message"]
            )
            ok = client.post(
                "/v1/nodes/heartbeat", headers=headers, json=_beat("n1", 1, url="http://10.1.2.3:1")
            )
            assert ok.status_code == 200
    finally:
        app.state.engine.dispose()
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not a network"):
        Settings(node_networks="10.0.0.0/33")


def test_a_revoked_node_is_refused_and_offered_no_calls(
    client: TestClient, app: FastAPI, issue_node: IssueNode
) -> None:
    n1 = issue_node("n1")
    client.post("/v1/nodes/heartbeat", headers=n1, json=_beat("n1", 8)).raise_for_status()
    with Reads(app.state.engine) as reads:
        assert [n.node_id for n in live_nodes(reads)] == ["n1"]
    with Session(app.state.engine) as session:
        node_credentials.revoke_credential(session, node_id="n1")
        session.commit()
    with Reads(app.state.engine) as reads:
        assert live_nodes(reads) == []  # at once, though its last heartbeat is fresh
    r = client.post("/v1/nodes/heartbeat", headers=n1, json=_beat("n1", 8))
    assert r.status_code == 401 and r.json()["error"]["message"] == "The credential of node n1 was revoked."
    assert client.get("/v1/nodes/registry", headers=n1).status_code == 401
    again = issue_node("n1")  # a new credential for the same node id works; the old one does not
    assert client.post("/v1/nodes/heartbeat", headers=again, json=_beat("n1", 8)).status_code == 200
    assert client.post("/v1/nodes/heartbeat", headers=n1, json=_beat("n1", 8)).status_code == 401


def test_a_bad_heartbeat_names_its_field(client: TestClient, node_headers: dict[str, str]) -> None:
    beat = _beat("node-test", 1)
    r = client.post("/v1/nodes/heartbeat", headers=node_headers, json={**beat, "slots_free": -1})
    assert r.status_code == 400 and r.json()["error"]["field"] == "slots_free"
    r = client.post("/v1/nodes/heartbeat", headers=node_headers, json={**beat, "node_id": "n 1"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "node_id"
    r = client.get("/v1/nodes/registry", params={"after": "x"}, headers=node_headers)
    assert r.status_code == 400 and r.json()["error"]["field"] == "query.after"
    r = client.post("/v1/nodes/heartbeat", headers=node_headers, json={**beat, "isolation": "microvm/qemu"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "isolation"


@pytest.mark.parametrize("isolation", ["sandbox", "microvm/kvm", "microvm/tcg"])
def test_a_heartbeat_says_what_isolates_the_nodes_calls(
    client: TestClient, node_headers: dict[str, str], isolation: str
) -> None:
    r = client.post(
        "/v1/nodes/heartbeat", headers=node_headers, json={**_beat("node-test", 1), "isolation": isolation}
    )
    assert r.status_code == 200 and r.json()["slots_free"] == 1


def test_b3os_node_credential_issues_lists_and_revokes(
    database_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("B3OS_DATABASE_URL", database_url)
    assert main(["node", "credential", "issue", "node-a"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "node credential issued for node-a (any earlier one no longer works)",
        "It is shown once; give these to that node alone:",
        "B3OS_NODE_ID=node-a",
    ]
    secret = out[3].removeprefix("B3OS_NODE_CREDENTIAL=")
    assert secret.startswith("b3n_") and len(secret) == 44
    assert main(["node", "credential", "list"]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith(f"node-a  {secret[:12]}...  issued ") and listed.rstrip().endswith("active")
    assert secret not in listed
    assert main(["node", "credential", "revoke", "node-a"]) == 0
    assert capsys.readouterr().out == "revoked the credential of node node-a: it is offered no more calls\n"
    assert main(["node", "credential", "list"]) == 0
    assert " revoked " in capsys.readouterr().out
    assert main(["node", "credential", "revoke", "node-b"]) == 1
    assert capsys.readouterr().err == "b3os node credential revoke: node node-b has no credential\n"
    assert main(["node", "credential", "issue", "bad id"]) == 1
    assert capsys.readouterr().err == (
        "b3os node credential issue: The node id 'bad id' is not 1 to 100 letters, digits, '.', '_' or '-'.\n"
    )
