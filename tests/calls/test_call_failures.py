"""Failures around the tool: a crashed api process, a pack no node could install, a node that died."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from sqlmodel import Session, col, delete, select
from workers import node_cgroups

from api.calls.tables import ActionCall
from api.models import Node
from cli.main import main as b3os_main
from node.vm import mounts
from packs.loader import bundle_files, load_built_bundle
from packs.signing import sign_manifest

from .calltest import call, error, running
from .stack import ECHO, FREE, KID, NAMESPACE, Stack, build_variant, publish

SLEEPY = {"mode": "sleep", "seconds": 30}


@pytest.mark.timeout(600)  # a hang guard: 30 s calls, and the stack's start when first, under load
def test_calls_of_a_crashed_api_process_free_their_slots_and_a_retry_takes_over_the_key(stack: Stack) -> None:
    url, proc = stack.start_api(
        listed=False,
        extra_env={
            "B3OS_CALL_OVERHEAD_S": "1",
            "B3OS_LEASE_GRACE_S": "1",
            "B3OS_MAX_CALL_TIMEOUT_MS": "2000",
        },
    )
    org = stack.org()

    def doomed(i: int) -> None:
        try:
            call(stack, org, f"{FREE}/fail@1", SLEEPY, url=url, timeout_ms=2000, key=f"crash-{i}")
        except httpx.TransportError:
            pass  # the api process dies under this request

    threads = [threading.Thread(target=doomed, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    while running(stack, org) < 4:
        time.sleep(0.02)
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait()
    for t in threads:
        t.join()
    held = error(call(stack, org, f"{FREE}/noop@1"), 429, "concurrency_limited")
    assert held["retry_after"] <= 3  # the dead process's leases end 2 s + 1 s after they began
    # the leases really expire (2 s + 1 s + 1 s of grace after they began): that is what this test shows
    time.sleep(4.0)
    assert call(stack, org, f"{FREE}/noop@1").status_code == 200
    # The key the dead process claimed is taken over once its claim ends, and the call runs again.
    retry = call(stack, org, f"{FREE}/fail@1", SLEEPY, timeout_ms=2000, key="crash-0")
    err = error(retry, 504, "tool_timed_out")
    assert err["call_id"].startswith("tcall_")


def test_a_version_no_node_could_install_is_pack_unavailable(stack: Stack, tmp_path) -> None:
    assert stack.publisher is not None and stack.signing_key is not None
    root = build_variant(tmp_path, stack.signing_key, pack=f"{NAMESPACE}/broken", pricing={"model": "free"})
    manifest, files = load_built_bundle(root)
    manifest["tool"]["bundle"]["archive"]["entries"] = 1  # the node refuses an archive with more entries
    signed = sign_manifest(manifest, bundle_files(files), stack.signing_key, KID)
    (root / "b3pack.json").write_text(json.dumps(signed))
    publish(stack, stack.publisher, root)
    err = error(call(stack, stack.org(), f"{NAMESPACE}/broken/noop@1"), 503, "pack_unavailable")
    assert err["message"].startswith(
        f"{NAMESPACE}/broken/noop@1: no node has {NAMESPACE}/broken 1.0.0 installed"
    )
    assert err["retry_after"] <= 2  # two heartbeats of the nodes


def test_a_call_placed_on_a_node_that_died_since_its_heartbeat_goes_to_another_and_the_first_is_free(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    node = stack.start_node("node-0")  # sorts before node-a: an idle tie goes to it
    run_dir = stack.root / "node-0-vms"
    try:
        stack.wait_installed("node-0", [f"{ECHO}@1.0.0"])
        node.popen.send_signal(signal.SIGKILL)
        node.popen.wait()
        org = stack.org()
        # placed on node-0 (an idle tie), which cannot be reached: nothing ran there, so the same request
        # places it on node-a
        r = call(stack, org, f"{ECHO}/noop@1")
        assert r.status_code == 200, r.text
        with Session(stack.engine) as session:
            stmt = (
                select(ActionCall)
                .where(col(ActionCall.org_id) == org.org_id)
                .order_by(col(ActionCall.started_at))
            )
            rows = [(c.node_id, c.code, c.total) for c in session.exec(stmt)]
        assert rows[0] == ("node-0", "tool_unavailable", 0) and rows[1][:2] == ("node-a", None), rows
    finally:
        with Session(stack.engine) as session:
            session.execute(delete(Node).where(col(Node.node_id) == "node-0"))
            session.commit()
        # What the killed node left (its pooled VMs' mounts, its cgroups), as an operator removes it.
        assert mounts.mounts_under(run_dir / f"node-{node.popen.pid}")
        assert b3os_main(["node", "clean", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"removed {run_dir / f'node-{node.popen.pid}'} (" in out
    assert f"/b3os-node-{node.popen.pid}\n" in out  # its cgroup in each hierarchy
    assert mounts.mounts_under(run_dir) == [] and list(run_dir.iterdir()) == []
    assert not node_cgroups(node.popen.pid)


async def test_a_sweep_that_cannot_reach_the_database_leaves_the_calls_answer_and_runs_again_next_call() -> (
    None
):
    from sqlalchemy import create_engine

    from api.calls.service import CallService
    from api.calls.settings import CallSettings

    # a database nobody listens for: the sweep after a call's outcome was recorded fails to connect
    service = CallService(
        engine=create_engine("postgresql+psycopg://b3os@127.0.0.1:1/b3os"), settings=CallSettings()
    )
    await service._maintain()  # no exception: the call it follows is answered as it ended
    assert service._next_maintenance == 0.0  # the next call sweeps again


async def test_the_end_of_a_call_nobody_waits_for_any_more_is_logged_a_database_fault_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    from sqlalchemy.exc import OperationalError

    from api.calls.service import _orphan_ended

    loop = asyncio.get_running_loop()
    for exc in (OperationalError("UPDATE", {}, Exception("connection refused")), RuntimeError("a bug")):
        ended: asyncio.Future[object] = loop.create_future()
        ended.set_exception(exc)
        _orphan_ended(ended)  # type: ignore[arg-type]
    down, bug = caplog.records[-2:]
    assert (down.levelname, down.getMessage(), down.exc_info) == (
        "WARNING",
        "a call could not record its outcome: the database could not be reached (OperationalError)",
        None,
    )
    assert bug.levelname == "ERROR" and bug.exc_info is not None and bug.exc_info[1] is exc
