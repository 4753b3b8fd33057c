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
    found, current = [], None
    for word in words:
        if word == "b3os":
            current = []
            found.append(current)
        elif word in ("&&", ";", "exec"):
            current = None
        elif current is not None:
            current.append(word)
    return found


def test_the_api_service_runs_the_real_factory(services: dict[str, Any]) -> None:
    command = services["api"]["command"]
    assert command[0] == "uvicorn" and "--factory" in command
    module, _, name = command[1].partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_the_worker_service_runs_the_worker_module(services: dict[str, Any]) -> None:
    command = services["worker"]["command"]
    assert command[:2] == ["python", "-m"]
    assert callable(importlib.import_module(command[2]).main)


def test_the_node_service_runs_b3os_commands_with_flags_that_exist(services: dict[str, Any]) -> None:
    commands = _b3os_commands(services["node"]["command"])
    assert [c[:2] for c in commands] == [["node", "build-base"], ["node", "run"]]
    for argv in commands:
        build_parser().parse_args(argv)  # exits (SystemExit) on a flag that does not exist
    assert services["node"]["environment"]["B3OS_NODE_URL"] == "http://node:8710"


def test_only_the_node_service_holds_a_node_credential_and_the_api_allows_its_network(
    services: dict[str, Any],
) -> None:
    node_env = services["node"]["environment"]
    assert node_env["B3OS_NODE_ID"] == "node-1"
    assert node_env["B3OS_NODE_CREDENTIAL"] == "${B3OS_NODE_CREDENTIAL:-}"
    for name in ("api", "worker", "egress"):
        assert "B3OS_NODE_CREDENTIAL" not in (services[name].get("environment") or {}), name
    assert all("NODE_TOKEN" not in str(s.get("environment")) for s in services.values())
    networks = ApiSettings(node_networks=services["api"]["environment"]["B3OS_NODE_NETWORKS"])
    assert any(ip_address("172.18.0.5") in n for n in networks.node_network_list())  # docker's bridges


def test_the_egress_service_runs_b3os_egress_and_the_api_reaches_it(services: dict[str, Any]) -> None:
    (argv,) = _b3os_commands(services["egress"]["command"])
    assert argv[:2] == ["egress", "run"]
    build_parser().parse_args(argv)
    port = argv[argv.index("--port") + 1]
    api_env = services["api"]["environment"]
    assert api_env["B3OS_EGRESS_URL"] == f"http://egress:{port}"
    assert api_env["B3OS_EGRESS_TOKEN"] == services["egress"]["environment"]["B3OS_EGRESS_TOKEN"]
    assert "B3OS_EGRESS_TOKEN" not in services["node"]["environment"]  # only the api talks to the proxy


def _names(model: type[BaseSettings], prefix: str) -> set[str]:
    return {f"{prefix}{name}".upper() for name in model.model_fields}


def test_every_b3os_variable_of_the_compose_file_is_read_by_some_part(services: dict[str, Any]) -> None:
    known = (
        _names(ApiSettings, "B3OS_")
        | _names(NodeSettings, "B3OS_")
        | _names(CallSettings, "B3OS_")
        | _names(ActivitySettings, "B3OS_")
        | _names(TemporalSettings, "B3OS_TEMPORAL_")
        | _names(EgressSettings, "B3OS_EGRESS_")
    )
    used = {
        name for s in services.values() for name in (s.get("environment") or {}) if name.startswith("B3OS_")
    }
    assert used and used - known == set()


def test_temporal_is_reached_by_the_api_and_the_worker_only(services: dict[str, Any]) -> None:
    # Temporal has no auth here: whoever reaches it could start runs and read every organization's
    assert "ports" not in services["temporal"]
    for name, service in services.items():
        for port in service.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    on_temporal = {name for name, s in services.items() if "temporal" in (s.get("networks") or [])}
    assert on_temporal == {"postgresql", "temporal", "temporal-ui", "api", "worker"}
    assert services["temporal"]["networks"] == ["temporal"] == services["temporal-ui"]["networks"]
