"""The JS runtime in real VMs: a js action's call runs its export with Node.js, and hostile code is held."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from jstest import js_call
from nodetest import echo_call, leftovers
from timeouts import is_timeout_sentence

from node.models import NodeCallResult
from node.runner import Runner
from node.vm.bwrap import BwrapDriver


@pytest.fixture(autouse=True)
def nothing_left(driver: BwrapDriver) -> Iterator[None]:
    yield
    assert leftovers(driver) == []


def _err(result: NodeCallResult) -> dict:
    assert result.error is not None, result.output
    return result.error.model_dump(exclude_none=True)


def test_a_js_call_gets_its_input_and_context_and_answers_its_output(js_runner: Runner) -> None:
    result = js_runner.call(js_call("echo", {"a": [1, "x"]}, connections={"token": {"org": "acme"}}))
    assert result.ok and result.ran, result.error
    assert result.output == {
        "input": {"a": [1, "x"]},
        "connections": {"token": {"org": "acme"}},
        "deadlineInFuture": True,
        "helper": "from lib",
    }
    assert set(result.timings) >= {"start", "copy", "unpack", "run", "delete"}
    assert result.usage["vcpu_ms"] > 0


def test_the_code_sees_only_the_vms_environment(js_runner: Runner) -> None:
    os.environ["B3OS_TEST_HOST_SECRET"] = "host-secret"
    try:
        result = js_runner.call(js_call("env"))
    finally:
        del os.environ["B3OS_TEST_HOST_SECRET"]
    assert result.ok, result.error
    vm_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", "PWD": "/work"}
    assert result.output == {"env": vm_env}


DENIED = {"error": "ERR_ACCESS_DENIED"}


def _codes(output: dict) -> dict:
    return {k: {"error": v["error"]} if "error" in v else v for k, v in output.items()}


def test_the_code_reads_only_its_own_files_and_writes_none(js_runner: Runner) -> None:
    result = js_runner.call(js_call("files"))
    assert result.ok, result.error
    assert _codes(result.output) == {"passwd": DENIED, "input": DENIED, "write": DENIED, "own": {"ok": True}}


def test_process_internals_addons_workers_and_eval_are_refused(js_runner: Runner) -> None:
    result = js_runner.call(js_call("internals"))
    assert result.ok, result.error
    assert _codes(result.output) == {
        "binding": DENIED,
        "dlopen": {"error": "ERR_DLOPEN_DISABLED"},
        "worker": DENIED,
        "evalString": {"error": "EvalError"},
        "fnString": {"error": "EvalError"},
    }


def test_spawning_a_process_is_refused(js_runner: Runner) -> None:
    result = js_runner.call(js_call("spawn"))
    assert result.ok, result.error
    assert _codes(result.output) == {"exec": DENIED, "spawn": DENIED}


def test_a_direct_socket_reaches_neither_the_host_nor_the_metadata_address(js_runner: Runner) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        result = js_runner.call(js_call("socket", {"port": listener.getsockname()[1]}))
        assert result.ok, result.error
        assert result.output == {"loopback": "ECONNREFUSED", "metadata": "ENETUNREACH"}
        with pytest.raises(TimeoutError):
            listener.accept()


def test_an_endless_loop_ends_at_the_calls_time_and_the_node_keeps_serving(js_runner: Runner) -> None:
    result = js_runner.call(js_call("spin", timeout_ms=1500))
    err = _err(result)
    assert err["code"] == "tool_timed_out" and is_timeout_sentence(err["message"], 1500)
    assert result.ran and result.usage["vcpu_ms"] > 0
    assert js_runner.call(js_call("echo", {})).ok


@pytest.mark.parametrize("export", ["hog", "hogBuffers"])
def test_unbounded_allocation_ends_the_call_and_the_node_keeps_serving(
    js_runner: Runner, export: str
) -> None:
    result = js_runner.call(js_call(export, timeout_ms=30_000))
    err = _err(result)
    assert err["code"] == "tool_failed" and err["reason"] in ("signal", "exit"), err
    assert result.ran
    assert js_runner.call(js_call("echo", {})).ok


def test_megabytes_of_output_end_the_call_as_output_too_large(js_runner: Runner) -> None:
    err = _err(js_runner.call(js_call("shout")))
    assert (err["code"], err["reason"]) == ("tool_failed", "output_too_large")


def test_a_thrown_error_names_its_declared_code_or_is_a_js_error(js_runner: Runner) -> None:
    declared = _err(js_runner.call(js_call("fail", {"code": "rate_limited", "message": "slow down"})))
    assert (declared["tool_code"], declared["tool_message"], declared["retryable"]) == (
        "rate_limited",
        "slow down",
        True,
    )
    other = _err(js_runner.call(js_call("fail", {"code": "EPERM", "message": "no"})))
    assert (other["tool_code"], other["tool_message"], other["retryable"]) == (
        "js.thrown",
        "Error: no",
        False,
    )


def test_an_output_that_is_not_an_object_is_refused(js_runner: Runner) -> None:
    err = _err(js_runner.call(js_call("notAnObject")))
    assert (err["tool_code"], err["tool_message"]) == (
        "js.output",
        "notAnObject returned an array, not an object",
    )


def test_timers_left_running_do_not_hold_the_call(js_runner: Runner) -> None:
    result = js_runner.call(js_call("lingers", timeout_ms=5000))
    assert result.ok and result.output == {"done": True}


def test_fetch_without_an_egress_proxy_fails_inside_the_code(js_runner: Runner) -> None:
    result = js_runner.call(js_call("fetchUrl", {"url": "https://api.example.com/x"}))
    err = _err(result)
    assert err["tool_code"] == "js.thrown"
    assert err["tool_message"] == "TypeError: fetch failed: this node has no egress proxy (B3OS_EGRESS_URL)"


def test_a_tool_call_still_runs_beside_js_calls(js_runner: Runner) -> None:
    assert js_runner.call(echo_call("noop", {})).output == {}


def test_the_egress_socket_takes_no_more_than_a_fetch_does(js_runner: Runner) -> None:
    wider = {"method": "GET", "url": "https://api.example.com/", "egress": ["evil.example.net"]}
    result = js_runner.call(js_call("rawSocket", {"request": wider}))
    assert result.ok, result.error
    assert result.output == {
        "error": {"reason": "bad_request", "message": "a request has only method, url, headers and body"}
    }
