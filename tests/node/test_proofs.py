"""The node's replay guard (node.credential.ProofChecker): each proven request is accepted once, and what it
remembers to refuse a replay is dropped once the request's timestamp refuses it anyway."""

from __future__ import annotations

from node.credential import SKEW_S, ProofChecker, call_key, signed_headers

SECRET = "b3n_" + "p" * 40
NODE = "node-p"
PATH = "/v1/node/calls"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _signed(at: float, body: bytes = b"{}") -> dict[str, str]:
    return signed_headers(call_key(SECRET), node_id=NODE, method="POST", path=PATH, body=body, now=at)


def test_a_request_is_accepted_once_and_its_replay_refused_until_its_timestamp_is_too_old() -> None:
    clock = Clock(1_000_000.0)
    checker = ProofChecker(SECRET, NODE, clock=clock)
    first = _signed(clock.now)
    assert checker.check(method="POST", path=PATH, headers=first, body=b"{}") is None
    again = _signed(clock.now)  # the same request sent again by the api: a new nonce
    assert checker.check(method="POST", path=PATH, headers=again, body=b"{}") is None
    for late_s in (1, SKEW_S - 1, SKEW_S):
        clock.now = 1_000_000.0 + late_s
        refused = checker.check(method="POST", path=PATH, headers=first, body=b"{}")
        assert refused == "The request was already received (a replay)."
    clock.now = 1_000_000.0 + SKEW_S + 1
    refused = checker.check(method="POST", path=PATH, headers=first, body=b"{}")
    assert refused is not None and "is more than 300 s from this node's clock" in refused


def test_what_it_remembers_is_forgotten_once_the_timestamps_are_too_old() -> None:
    clock = Clock(2_000_000.0)
    checker = ProofChecker(SECRET, NODE, clock=clock)
    for i in range(1_000):  # 1,000 requests over 100 s
        clock.now = 2_000_000.0 + i / 10
        assert checker.check(method="POST", path=PATH, headers=_signed(clock.now), body=b"{}") is None
    assert checker.remembered == 1_000
    clock.now += SKEW_S + 2
    assert checker.check(method="POST", path=PATH, headers=_signed(clock.now), body=b"{}") is None
    assert checker.remembered == 1  # only the last one


def test_a_clock_set_back_forgets_what_it_now_refuses_too() -> None:
    clock = Clock(3_000_000.0)
    checker = ProofChecker(SECRET, NODE, clock=clock)
    for i in range(10):
        assert checker.check(method="POST", path=PATH, headers=_signed(clock.now + i), body=b"{}") is None
    clock.now -= 3_600  # NTP set the clock back an hour: those ten are refused for their timestamp now
    assert checker.check(method="POST", path=PATH, headers=_signed(clock.now), body=b"{}") is None
    assert checker.remembered == 1
