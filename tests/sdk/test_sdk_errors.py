"""The SDK's typed errors and its retries against the real stack: each error's status, code, reason and
retry_after; a 429 sent again after exactly its Retry-After with the same Idempotency-Key, charged once."""

from __future__ import annotations

import socket
import time

import pytest
from realstack import RoutineStack

from b3os import (
    B3OS,
    ActionFailed,
    APIError,
    B3OSError,
    ConfigError,
    ConnectionFailed,
    Forbidden,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    RateLimited,
    Retry,
    Unauthorized,
    Unavailable,
)

from .upstreams import PUBLIC, SEARCH, Recorded, Reply, geo_answers, json_reply, scripted


def test_a_429_is_sent_again_after_exactly_its_retry_after_with_the_same_key_and_charged_once(
    stack: RoutineStack,
) -> None:
    arrived = scripted(
        stack,
        "/public/sdk-busy-once",
        [json_reply({"message": "slow down"}, 429, [("Retry-After", "1")]), json_reply({"ok": True})],
    )
    org = stack.org()
    retries: list[Retry] = []
    with B3OS(stack.url, org.key, on_retry=retries.append) as b3os:
        answer = b3os.actions.call(PUBLIC, {"path": "sdk-busy-once"})
        usage = b3os.usage()
    assert answer["output"] == {"ok": True}
    (retry,) = retries
    assert (retry.attempt, retry.wait_s, retry.method, retry.path) == (1, 1.0, "POST", "/v1/actions/call")
    assert isinstance(retry.error, RateLimited)
    error = retry.error
    assert (error.code, error.reason, error.retry_after) == ("rate_limited", "upstream", 1.0)
    assert len(arrived) == 2 and arrived[1] - arrived[0] >= 1.0
    # one key, made for this call, sent both times; the answer stored under it is the one that succeeded
    assert retry.idempotency_key is not None and retry.idempotency_key.startswith("b3os-sdk-")
    assert stack.stored_keys(org) == {retry.idempotency_key: answer["call_id"]}
    assert usage["units"]["actions.call"] == 1 and usage["cost"]["total"] == 210  # the floor and the price


def test_a_call_that_timed_out_is_sent_again_with_the_key_its_error_carries_and_runs_once(
    stack: RoutineStack,
) -> None:
    arrived: list[float] = []

    def slow(_: Recorded) -> Reply:
        arrived.append(time.monotonic())
        time.sleep(3)  # longer than the client waits below
        return json_reply({"ok": True})

    stack.upstreams["api.example.com"].on("/public/sdk-slow", slow)
    org = stack.org()
    with B3OS(stack.url, org.key, timeout=1.0) as hasty, pytest.raises(ConnectionFailed) as timed_out:
        hasty.actions.call(PUBLIC, {"path": "sdk-slow"})
    key = timed_out.value.idempotency_key
    assert timed_out.value.cause == "ReadTimeout" and key is not None and key.startswith("b3os-sdk-")
    with B3OS(stack.url, org.key) as b3os:  # the same request again: answered from the first, never re-run
        answer = b3os.actions.call(PUBLIC, {"path": "sdk-slow"}, idempotency_key=key)
        usage = b3os.usage()
    assert answer["output"] == {"ok": True} and len(arrived) == 1
    assert stack.stored_keys(org) == {key: answer["call_id"]}
    assert usage["units"]["actions.call"] == 1


def test_a_given_key_is_the_one_every_retry_sends(stack: RoutineStack) -> None:
    scripted(
        stack,
        "/public/sdk-busy-twice",
        [json_reply({}, 503, [("Retry-After", "1")])] * 2 + [json_reply({"n": 3})],
    )
    org = stack.org()
    retries: list[Retry] = []
    with B3OS(stack.url, org.key, on_retry=retries.append) as b3os:
        answer = b3os.actions.call(PUBLIC, {"path": "sdk-busy-twice"}, idempotency_key="mine-1")
    assert answer["output"] == {"n": 3}
    assert [(r.attempt, r.idempotency_key, r.error.code) for r in retries] == [
        (1, "mine-1", "action_unavailable"),
        (2, "mine-1", "action_unavailable"),
    ]
    assert stack.stored_keys(org) == {"mine-1": answer["call_id"]}


def test_retries_are_bounded_and_the_last_error_carries_code_reason_and_retry_after(
    stack: RoutineStack,
) -> None:
    arrived = scripted(stack, "/public/sdk-always-busy", [json_reply({}, 429, [("Retry-After", "1")])])
    with B3OS(stack.url, stack.org().key, max_retries=1) as b3os:
        with pytest.raises(RateLimited) as refused:
            b3os.actions.call(PUBLIC, {"path": "sdk-always-busy"})
        err = refused.value
        assert (err.status, err.code, err.reason, err.retry_after) == (429, "rate_limited", "upstream", 1.0)
        assert err.headers["retry-after"] == "1" and err.body["retry_after"] == 1
        assert len(arrived) == 2  # the first request and one retry
        with pytest.raises(RateLimited):  # a Retry-After longer than max_retry_wait_s is raised at once
            b3os.with_options(max_retry_wait_s=0.5).actions.call(PUBLIC, {"path": "sdk-always-busy"})
        assert len(arrived) == 3
    scripted(stack, "/public/sdk-down", [json_reply({}, 503, [("Retry-After", "7")])])
    with B3OS(stack.url, stack.org().key, max_retries=0) as b3os, pytest.raises(Unavailable) as down:
        b3os.actions.call(PUBLIC, {"path": "sdk-down"})
    assert (down.value.status, down.value.code, down.value.reason) == (503, "action_unavailable", "upstream")
    assert down.value.retry_after == 7.0


def test_each_error_answer_is_its_typed_exception_with_the_apis_sentence(stack: RoutineStack) -> None:
    scripted(stack, "/public/sdk-broken", [json_reply({"oops": True}, 500)])
    geo_answers(stack)
    with B3OS(stack.url, stack.org().key) as b3os:
        with pytest.raises(InvalidRequest) as bad:
            b3os.actions.call(SEARCH, {"name": "B"})
        assert str(bad.value) == "input.name: 'B' is too short (400 invalid_request)"
        assert (bad.value.status, bad.value.message, bad.value.retry_after) == (
            400,
            "input.name: 'B' is too short",
            None,
        )
        with pytest.raises(NotFound) as missing:
            b3os.actions.resolve("io.b3os/open-meteo/nowhere@1")
        assert missing.value.code == "not_found" and missing.value.body["missing"] == "action"
        with pytest.raises(NotFound):
            b3os.actions.get_pack("io.b3os", "no-such-pack")
        with pytest.raises(ActionFailed) as failed:
            b3os.actions.call(PUBLIC, {"path": "sdk-broken"})
        err = failed.value
        assert (err.status, err.code, err.reason) == (502, "action_failed", "status")
        assert err.body["upstream_status"] == 500 and err.body["call_id"].startswith("tcall_")
        with pytest.raises(Forbidden) as forbidden:
            b3os.routines.list()
        assert forbidden.value.body["missing_scope"] == "routines:read"
        b3os.actions.call(SEARCH, {"name": "Berlin"}, idempotency_key="once")
        with pytest.raises(IdempotencyKeyReused) as reused:
            b3os.actions.call(SEARCH, {"name": "Paris"}, idempotency_key="once")
        assert (reused.value.status, reused.value.code) == (422, "idempotency_key_reused")
    with B3OS(stack.url, "b3_not-a-key") as stranger, pytest.raises(Unauthorized) as unknown:
        stranger.actions.list_packs()
    assert (unknown.value.status, unknown.value.code) == (401, "unauthorized")
    assert isinstance(unknown.value, APIError) and isinstance(unknown.value, B3OSError)


def test_no_settings_and_no_api_are_errors_that_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("B3OS_API_URL", raising=False)
    monkeypatch.delenv("B3OS_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"^No api URL: pass api_url= or set B3OS_API_URL"):
        B3OS()
    monkeypatch.setenv("B3OS_API_URL", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"^No API key: pass api_key= or set B3OS_API_KEY\.$"):
        B3OS()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused
        monkeypatch.setenv("B3OS_API_KEY", "b3_k")
        with B3OS(closed) as b3os, pytest.raises(ConnectionFailed) as unreachable:
            b3os.usage()
    assert str(unreachable.value) == f"Cannot reach the api at {closed} (ConnectError)"
    assert "b3_k" not in repr(b3os)


def test_tls_is_verified_with_the_systems_certificates_for_https_and_nothing_is_trusted_over_http() -> None:
    import ssl

    from b3os._wire import tls_for

    assert tls_for("https://api.example.com") is True  # httpx's default: the system's trusted certificates
    plain = tls_for("http://127.0.0.1:8700")
    assert isinstance(plain, ssl.SSLContext)
    # not loaded (a fifth of a CLI command's time), and nothing it could verify would pass
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
