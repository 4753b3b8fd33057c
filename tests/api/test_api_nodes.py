"""The node seam: heartbeat registration and refresh, node-token auth, live nodes for placement."""

from __future__ import annotations

from collections.abc import Callable

from apitest import Org
from conftest import NODE_TOKEN
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.nodes import live_nodes

NODE = {"Authorization": f"Bearer {NODE_TOKEN}"}


def _beat(node_id: str, free: int, installed: list[str] | None = None) -> dict[str, object]:
    return {
        "node_id": node_id,
        "url": f"http://127.0.0.1:9{free}00",
        "slots_total": 8,
        "slots_free": free,
        "installed": installed or [],
    }


def test_heartbeats_register_and_refresh_nodes_for_placement(client: TestClient, app: FastAPI) -> None:
    r = client.post("/v1/nodes/heartbeat", headers=NODE, json=_beat("n1", 3))
    assert r.status_code == 200 and r.json()["slots_free"] == 3
    client.post("/v1/nodes/heartbeat", headers=NODE, json=_beat("n2", 7)).raise_for_status()
    r = client.post(
        "/v1/nodes/heartbeat", headers=NODE, json=_beat("n1", 8, ["com.example.tools/echo@1.0.0"])
    )
    assert r.json()["installed"] == ["com.example.tools/echo@1.0.0"]
    with Session(app.state.engine) as session:
        nodes = live_nodes(session)
        assert [(n.node_id, n.slots_free) for n in nodes] == [("n1", 8), ("n2", 7)]
        assert nodes[0].url == "http://127.0.0.1:9800"
        assert live_nodes(session, max_age_s=-1) == []


def test_the_node_seam_takes_only_the_node_token(client: TestClient, make_org: Callable[..., Org]) -> None:
    org = make_org()
    for headers in (org.headers, {"Authorization": "Bearer wrong"}, {}):
        r = client.post("/v1/nodes/heartbeat", headers=headers, json=_beat("n1", 1))
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        assert client.get("/v1/nodes/registry", headers=headers).status_code == 401


def test_a_bad_heartbeat_names_its_field(client: TestClient) -> None:
    r = client.post("/v1/nodes/heartbeat", headers=NODE, json={**_beat("n1", 1), "slots_free": -1})
    assert r.status_code == 400 and r.json()["error"]["field"] == "slots_free"
    r = client.post("/v1/nodes/heartbeat", headers=NODE, json={**_beat("n 1", 1)})
    assert r.status_code == 400 and r.json()["error"]["field"] == "node_id"
    r = client.get("/v1/nodes/registry", params={"after": "x"}, headers=NODE)
    assert r.status_code == 400 and r.json()["error"]["field"] == "query.after"
