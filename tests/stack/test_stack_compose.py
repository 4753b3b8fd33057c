"""docker-compose.yml names the real entry points: the api factory, `b3os` commands and flags that exist,
the worker module, and only B3OS_* variables some part reads."""

from __future__ import annotations

import importlib
import shlex
from ipaddress import ip_address
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from activities.config import ActivitySettings
from api.calls.settings import CallSettings
from api.config import Settings as ApiSettings
from cli.main import build_parser
from egress.config import EgressSettings
from engine.temporal_server import DYNAMIC_CONFIG
from engine.worker import TemporalSettings
from node.config import Settings as NodeSettings

from .stacktest import REPO


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return dict(compose["services"])


def _b3os_commands(command: list[str]) -> list[list[str]]:
    """The `b3os ...` invocations of a command, also inside `sh -c "a && exec b"`."""
    words = shlex.split(command[2]) if command[:2] == ["sh", "-c"] else command
    found: list[list[str]] = []
    current: list[str] | None = None
    for word in words:
        if word == "b3os":
            current = []
            found.append(current)
        elif word in ("&&", ";", "exec"):
            current = None
        elif current is not None:
            current.append(word)
    return found


def _of_kind(services: dict[str, Any], kind: str) -> dict[str, Any]:
    """The services named `<kind>-1`, `<kind>-2`, ..."""
    return {name: s for name, s in services.items() if name.rpartition("-")[0] == kind}


def _part(service: dict[str, Any]) -> str:
    """Which part a service runs, from its command."""
    command = service.get("command") or []
    if command[:1] == ["uvicorn"]:
        return "api"
    if command[:2] == ["python", "-m"]:
        return "worker"
    b3os = _b3os_commands(command)
    return b3os[-1][0] if b3os else "other"  # `node` or `egress`


def test_the_distributed_shape_has_two_apis_three_workers_two_nodes_and_the_egress_proxy(
    services: dict[str, Any],
) -> None:
    parts = sorted(_part(s) for s in services.values())
    assert parts.count("api") == parts.count("node") == 2 and parts.count("worker") == 3 and "egress" in parts
    assert set(_of_kind(services, "api")) == {"api-1", "api-2"}
    assert set(_of_kind(services, "worker")) == {"worker-1", "worker-2", "worker-3"}
    assert set(_of_kind(services, "node")) == {"node-1", "node-2"}
    ours = [s for s in services.values() if _part(s) != "other"]
    assert len(ours) == 8 and all(s["restart"] == "unless-stopped" for s in ours)  # Docker restarts them


def test_the_api_services_run_the_real_factory(services: dict[str, Any]) -> None:
    for service in _of_kind(services, "api").values():
        command = service["command"]
        assert command[0] == "uvicorn" and "--factory" in command
        module, _, name = command[1].partition(":")
        assert callable(getattr(importlib.import_module(module), name))


def test_the_apis_share_one_postgresql_database_and_one_blob_volume(services: dict[str, Any]) -> None:
    apis = list(_of_kind(services, "api").values())
    urls = {a["environment"]["B3OS_DATABASE_URL"] for a in apis}
    (url,) = urls
    assert url.startswith("postgresql+psycopg://") and "@postgresql:5432/" in url
    assert {a["environment"]["B3OS_BLOB_DIR"] for a in apis} == {"/data/blobs"}
    assert all("blobs:/data/blobs" in a["volumes"] for a in apis)
    assert all(a["depends_on"]["postgresql"] == {"condition": "service_healthy"} for a in apis)
    # each on its own loopback port; both answer to `api`, the name the workers and nodes use
    assert sorted(a["ports"][0] for a in apis) == ["127.0.0.1:8700:8700", "127.0.0.1:8701:8700"]
    assert all(a["networks"]["default"]["aliases"] == ["api"] for a in apis)
    port = apis[0]["command"][apis[0]["command"].index("--port") + 1]
    others = {**_of_kind(services, "worker"), **_of_kind(services, "node")}
    assert {s["environment"]["B3OS_API_URL"] for s in others.values()} == {f"http://api:{port}"}


def test_the_worker_services_run_the_worker_module(services: dict[str, Any]) -> None:
    for service in _of_kind(services, "worker").values():
        command = service["command"]
        assert command[:2] == ["python", "-m"]
        assert callable(importlib.import_module(command[2]).main)
        # Docker kills a stopping worker only after the worker's own shutdown has had its time
        grace = service["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) > TemporalSettings().shutdown_s


def test_one_worker_polls_the_busy_lane_the_apis_start_busy_organizations_runs_on(
    services: dict[str, Any],
) -> None:
    queues = [w["environment"].get("B3OS_TEMPORAL_TASK_QUEUE") for w in _of_kind(services, "worker").values()]
    lanes = {
        a["environment"].get("B3OS_TEMPORAL_BUSY_TASK_QUEUE") for a in _of_kind(services, "api").values()
    }
    assert lanes == {None}  # the api's default
    busy = ApiSettings.model_fields["temporal_busy_task_queue"].default
    assert sorted(queues, key=str) == [None, None, busy]  # two on the main queue, one on the busy lane
    assert services["worker-3"]["cpu_shares"] < 1024  # Docker's default: the main lane takes the CPU first


def test_the_node_services_run_b3os_commands_with_flags_that_exist(services: dict[str, Any]) -> None:
    for name, service in _of_kind(services, "node").items():
        commands = _b3os_commands(service["command"])
        assert [c[:2] for c in commands] == [["node", "build-base"], ["node", "run"]]
        for argv in commands:
            build_parser().parse_args(argv)  # exits (SystemExit) on a flag that does not exist
        port = commands[-1][commands[-1].index("--port") + 1]
        assert service["environment"]["B3OS_NODE_URL"] == f"http://{name}:{port}"


def test_each_node_has_its_own_id_credential_and_cache_and_only_nodes_hold_one(
    services: dict[str, Any],
) -> None:
    nodes = _of_kind(services, "node")
    envs = [n["environment"] for n in nodes.values()]
    assert [e["B3OS_NODE_ID"] for e in envs] == ["node-1", "node-2"]
    assert [e["B3OS_NODE_CREDENTIAL"] for e in envs] == [
        "${B3OS_NODE_1_CREDENTIAL:-}",
        "${B3OS_NODE_2_CREDENTIAL:-}",
    ]
    assert len({str(n["volumes"]) for n in nodes.values()}) == 2
    for name, service in services.items():
        if name not in nodes:
            assert "B3OS_NODE_CREDENTIAL" not in (service.get("environment") or {}), name
    assert all("NODE_TOKEN" not in str(s.get("environment")) for s in services.values())
    for env in envs:  # a node runs tools: it reaches the api alone
        assert not {"B3OS_DATABASE_URL", "B3OS_WORKER_TOKEN", "B3OS_TEMPORAL_ADDRESS"} & set(env)
    for api in _of_kind(services, "api").values():
        networks = ApiSettings(node_networks=api["environment"]["B3OS_NODE_NETWORKS"])
        assert any(ip_address("172.18.0.5") in n for n in networks.node_network_list())  # docker's bridges


def test_the_egress_service_runs_b3os_egress_and_the_apis_reach_it(services: dict[str, Any]) -> None:
    (argv,) = _b3os_commands(services["egress"]["command"])
    assert argv[:2] == ["egress", "run"]
    build_parser().parse_args(argv)
    port = argv[argv.index("--port") + 1]
    for api in _of_kind(services, "api").values():
        env = api["environment"]
        assert env["B3OS_EGRESS_URL"] == f"http://egress:{port}"
        assert env["B3OS_EGRESS_TOKEN"] == services["egress"]["environment"]["B3OS_EGRESS_TOKEN"]
        assert env["B3OS_EGRESS_PUBLIC_KEY"] == "${B3OS_EGRESS_PUBLIC_KEY:-}"  # empty: asked from the proxy
    for name, service in services.items():  # only the apis talk to the proxy
        if _part(service) not in ("api", "egress"):
            assert "B3OS_EGRESS_TOKEN" not in (service.get("environment") or {}), name


def _names(model: type[BaseSettings], prefix: str) -> set[str]:
    return {f"{prefix}{name}".upper() for name in model.model_fields}


def test_every_b3os_variable_of_a_service_is_read_by_the_part_it_runs(services: dict[str, Any]) -> None:
    reads = {
        "api": _names(ApiSettings, "B3OS_") | _names(CallSettings, "B3OS_"),
        "worker": _names(ActivitySettings, "B3OS_") | _names(TemporalSettings, "B3OS_TEMPORAL_"),
        "node": _names(NodeSettings, "B3OS_"),
        "egress": _names(EgressSettings, "B3OS_EGRESS_"),
    }
    unread = {}
    for name, service in services.items():
        used = {v for v in (service.get("environment") or {}) if v.startswith("B3OS_")}
        if used:
            unread[name] = used - reads[_part(service)]
    assert len(unread) == 8 and all(v == set() for v in unread.values()), unread


def test_temporal_is_reached_by_the_apis_and_the_workers_only(services: dict[str, Any]) -> None:
    # Temporal has no auth here: whoever reaches it could start runs and read every organization's
    assert "ports" not in services["temporal"]
    for name, service in services.items():
        for port in service.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    on_temporal = {name for name, s in services.items() if "temporal" in (s.get("networks") or [])}
    assert on_temporal == {
        "postgresql",
        "temporal",
        "temporal-ui",
        "api-1",
        "api-2",
        "worker-1",
        "worker-2",
        "worker-3",
    }
    assert services["temporal"]["networks"] == ["temporal"] == services["temporal-ui"]["networks"]


def test_temporal_runs_with_the_dynamic_config_the_dev_server_gets(services: dict[str, Any]) -> None:
    # a run's tasks reach its worker as fast on the cluster as on `b3os dev` (engine/temporal_server.py)
    temporal = services["temporal"]
    path = temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    source, target, mode = next(v.split(":") for v in temporal["volumes"] if v.split(":")[1] == path)
    assert mode == "ro"
    config = yaml.safe_load((REPO / source).read_text())
    assert {key: [v["value"] for v in values] for key, values in config.items()} == {
        key: [value] for key, value in DYNAMIC_CONFIG.items()
    }
