"""Node fixtures: the base template (built once if missing), a real bwrap driver, an install cache."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from jstest import install_js
from nodetest import ECHO, ECHO_TOOL, HOSTILE, VM_UID_BASE, install_tree

from node.cache import InstallCache
from node.config import Settings
from node.js.runtime import prepare_runtime
from node.runner import Runner
from node.template import build_base, rootfs_path
from node.vm.bwrap import BwrapDriver
from node.vm.guest import Guest, build_guest
from node.vm.microvm import MicroVmDriver


@pytest.fixture(scope="session")
def base_rootfs() -> Path:
    """The base template, built by debootstrap (~1 minute) when this machine has none yet."""
    base_dir = Settings().base_dir
    build_base(base_dir)
    return rootfs_path(base_dir)


@pytest.fixture(scope="session")
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="b3os-vms-", dir="/tmp"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def driver(base_rootfs: Path, run_dir: Path) -> Iterator[BwrapDriver]:
    drv = BwrapDriver(base_rootfs=base_rootfs, run_dir=run_dir, pool_size=2, uid_base=VM_UID_BASE)
    yield drv
    drv.close()


@pytest.fixture(scope="session")
def cache() -> Iterator[InstallCache]:
    root = Path(tempfile.mkdtemp(prefix="b3os-cache-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        c = InstallCache(root)
        install_tree(c, ECHO, ECHO_TOOL)
        for tool in sorted(HOSTILE.iterdir()):
            if (tool / "tool").is_dir():
                install_tree(c, f"com.example.hostile/{tool.name}", tool / "tool")
        yield c
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def runner(driver: BwrapDriver, cache: InstallCache) -> Runner:
    return Runner(driver, cache, slots=8)


@pytest.fixture(scope="session")
def js_runner(driver: BwrapDriver, cache: InstallCache) -> Runner:
    """A runner with the JS runtime, and the test js pack (tests/node/jspack) installed."""
    install_js(cache)
    return Runner(driver, cache, slots=8, js_runtime=prepare_runtime(cache.root))


@pytest.fixture(scope="session")
def guest(base_rootfs: Path) -> Guest:
    """The microvm guest (`b3os node build-guest`), built when missing or stale (its kernel package is
    downloaded once, ~27 MB; a build takes a few seconds, a cached one a second to check)."""
    return build_guest(Settings().guest_dir, base_rootfs.parent)


@pytest.fixture(scope="module")
def microvm(guest: Guest, run_dir: Path) -> Iterator[MicroVmDriver]:
    """A microvm driver with a pool of 2 booted VMs, one per test module (a TCG boot takes a core for
    seconds: the module's tests share the pool, and xdist keeps a module on one worker)."""
    drv = MicroVmDriver(guest=guest, run_dir=run_dir, pool_size=2, uid_base=VM_UID_BASE + 48)
    yield drv
    drv.close()


@pytest.fixture(scope="module")
def microvm_runner(microvm: MicroVmDriver, cache: InstallCache) -> Runner:
    return Runner(microvm, cache, slots=4)
