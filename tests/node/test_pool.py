"""The sandbox driver's pool gives way to the calls: VMs are prepared and removed beside a short call only
when the pool runs low or the remover falls behind, and a long call holds that work back `QUIET_S` only."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from nodetest import leftovers
from workers import PATIENCE_S

from node.vm import bwrap
from node.vm.bwrap import BwrapDriver


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _eventually(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_beside_a_starting_call_the_pool_refills_only_below_half_and_removes_once_the_call_ends(
    driver: BwrapDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert driver.pool_target() == 2  # so half the pool is one VM
    assert len(driver.settle(timeout_s=PATIENCE_S)) == 2
    monkeypatch.setattr(bwrap, "QUIET_S", 3600.0)  # every call counts as just started
    running = driver.claim(time.monotonic() + 5)
    driver.handed_over(running)  # as its tool's mount does: its place in the pool is free
    try:
        # one VM left, half the pool: it is not refilled while the call runs
        assert len(driver.settle(timeout_s=0.5)) == 1
        used = driver.claim(time.monotonic() + 5)
        driver.handed_over(used)
        # none left: refilled at once, up to half
        _eventually("the empty pool was not refilled", lambda: driver.pool_ready() == 1)
        assert len(driver.settle(timeout_s=0.5)) == 1
        used.delete()
        time.sleep(0.5)
        assert used.path.exists(), "the used VM was removed beside a running call"
        assert driver.pool_ready() == 1
    finally:
        running.delete()
    # no call runs: the pool is full again, and both used VMs are gone
    assert len(driver.settle(timeout_s=PATIENCE_S)) == 2
    assert not used.path.exists() and not running.path.exists()


def test_a_long_call_holds_the_pools_work_back_for_a_moment_only(driver: BwrapDriver) -> None:
    assert len(driver.settle(timeout_s=PATIENCE_S)) == 2
    running = driver.claim(time.monotonic() + 60)
    try:
        used = driver.claim(time.monotonic() + 5)
        used.delete()
        driver.handed_over(running)
        # the first call still runs: past QUIET_S the pool is refilled and the used VM removed all the same
        assert len(driver.settle(timeout_s=PATIENCE_S)) == 2
        assert not used.path.exists()
        assert running.alive()
    finally:
        running.delete()
