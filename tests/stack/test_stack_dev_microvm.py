"""`B3OS_NODE_DRIVER=microvm b3os dev` runs examples/routines/hello.yaml with every echo step in a QEMU
microVM (marker `microvm_full`: seven calls, each a guest booted, take tens of seconds under TCG)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import loopback
import pytest

from node.config import Settings
from node.vm.guest import build_guest

from .stacktest import REPO, Dev, running_dev, wait_until
from .stacktest import b3os_process as _b3os

pytestmark = pytest.mark.microvm_full
HELLO = REPO / "examples" / "routines" / "hello.yaml"


POOL = 6  # hello.yaml's seven calls, three at once: under TCG a call that boots its own VM (seconds on a
# busy machine) may not fit the echo action's 10 s, so each takes a VM booted ahead


@pytest.fixture(scope="module")
def dev() -> Iterator[Dev]:
    settings = Settings()
    build_guest(settings.guest_dir, settings.base_dir)
    with running_dev("b3os-dev-microvm-", B3OS_NODE_DRIVER="microvm", B3OS_MICROVM_POOL_SIZE=str(POOL)) as d:
        yield d


def _pool_ready(dev: Dev) -> float:
    text = loopback.get(f"http://127.0.0.1:{dev.ports['--node-port']}/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("b3os_node_pool_ready ")]
    return float(lines[0].split()[1])


def test_hello_runs_on_microvms_and_the_node_says_so(dev: Dev) -> None:
    wait_until("the node booted its pool", lambda: _pool_ready(dev) == POOL, timeout_s=POOL * 30)
    done = _b3os(dev.root, dev.env, "routine", "run", str(HELLO), "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    run = json.loads(done.stdout)
    assert run["status"] == "succeeded"
    assert run["outputs"]["greeting"] == "hello world, again (3 friends next)"
    assert run["outputs"]["friends"] == ["1. hello ada", "2. hello grace", "3. hello linus"]
    node_log = (dev.data_dir / "logs" / "node.log").read_text()
    assert "b3os node run: calls run in microvm/" in node_log
