"""The node faults that fail a call before its command runs, each produced by a real node through the api:
an input file larger than the node's /in (`tool_unavailable` / `copy`) and an installed tool tree an
operator deleted (`tool_failed` / `unpack`). Neither is billed."""

from __future__ import annotations

import base64
import shutil
import time

from sqlmodel import Session, col, delete, select
from workers import PATIENCE_S

from api.calls.tables import ActionCall, MeterEvent
from api.models import Node

from .calltest import call, error
from .stack import ECHO, NAMESPACE, Stack, build_variant, publish

NOTHING = {"compute": 0, "floor": 0, "price": 0, "total": 0}


def _only_call(stack: Stack, org_id: str) -> ActionCall:
    with Session(stack.engine) as session:
        (row,) = session.exec(select(ActionCall).where(col(ActionCall.org_id) == org_id)).all()
        assert session.exec(select(MeterEvent).where(col(MeterEvent.call_id) == row.id)).all() == []
        return row


def test_an_input_file_larger_than_the_nodes_in_is_tool_unavailable_copy_and_free(stack: Stack) -> None:
    # "node-0-in" sorts before node-a: an idle tie goes to it
    node = stack.start_node("node-0-in", extra_env={"B3OS_IN_KB": "64"})
    try:
        stack.wait_installed("node-0-in", [f"{ECHO}@1.0.0"])
        org = stack.org()
        big = base64.b64encode(b"x" * 100_000).decode()
        r = call(stack, org, f"{ECHO}/echo@1", {"text": "hi", "file": {"$bytes": big, "name": "big.bin"}})
        err = error(r, 503, "tool_unavailable", "copy")
        assert err["message"] == ("the input files could not be put in the VM's /in: No space left on device")
        assert err["cost"] == NOTHING
        row = _only_call(stack, org.org_id)
        assert (row.node_id, row.code, row.reason, row.ran, row.total) == (
            "node-0-in", "tool_unavailable", "copy", False, 0
        )  # fmt: skip
    finally:
        node.stop()  # SIGTERM: the node removes its VMs and says it is gone
        with Session(stack.engine) as session:
            session.execute(delete(Node).where(col(Node.node_id) == "node-0-in"))
            session.commit()


def test_a_tool_tree_deleted_from_the_install_cache_is_tool_failed_unpack_and_free(
    stack: Stack, tmp_path
) -> None:
    assert stack.publisher is not None and stack.signing_key is not None
    pack = f"{NAMESPACE}/gone"
    root = build_variant(
        tmp_path, stack.signing_key, pack=pack, pricing={"model": "per_call", "usd": "0.0001"}
    )
    publish(stack, stack.publisher, root)
    stack.wait_installed("node-a", [f"{pack}@1.0.0"])
    shutil.rmtree(stack.root / "node-a-cache" / NAMESPACE / "gone" / "1.0.0" / "tool")  # what an operator did
    org = stack.org()
    err = error(call(stack, org, f"{pack}/noop@1"), 502, "tool_failed", "unpack")
    assert err["message"] == "the tool's unpacked files are missing from the node's install cache"
    assert err["cost"] == NOTHING  # it failed before its command ran: nothing, not even the floor
    row = _only_call(stack, org.org_id)
    assert (row.code, row.reason, row.ran, row.total) == ("tool_failed", "unpack", False, 0)
    # The node dropped the version: its next heartbeat no longer lists it, and the api places no call there.
    deadline = time.monotonic() + PATIENCE_S
    while True:
        with Session(stack.engine) as session:
            node = session.get(Node, "node-a")
            assert node is not None
            if f"{pack}@1.0.0" not in node.installed:
                break
        assert time.monotonic() < deadline, "the node still lists the version"
        time.sleep(0.1)
    err = error(call(stack, org, f"{pack}/noop@1"), 503, "pack_unavailable")
    assert err["message"].startswith(f"{pack}/noop@1: no node has {pack} 1.0.0 installed")
