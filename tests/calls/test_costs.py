"""Prices and the cost of one call, in integer micro-USD."""

from __future__ import annotations

import pytest

from api.calls.costs import (
    PriceError,
    UnitPrices,
    action_price_microusd,
    call_ceiling,
    call_cost,
    http_call_cost,
    parse_usd,
)

PRICES = UnitPrices.parse(vcpu_ms_usd="0.00000002", gib_ms_usd="0.0000000025", tool_call_usd="0.00001")


@pytest.mark.parametrize(
    ("text", "micro"), [("0.0001", 100), ("1", 1_000_000), ("0.000001", 1), ("0.5", 500_000)]
)
def test_a_decimal_price_is_parsed_exactly(text: str, micro: int) -> None:
    assert parse_usd(text) == micro


@pytest.mark.parametrize("text", ["0.0000001", "-1", "1e-4", "0,1", "", "abc", ".5"])
def test_a_price_that_is_not_a_plain_decimal_is_refused(text: str) -> None:
    with pytest.raises(PriceError, match="price"):
        parse_usd(text)


def test_the_action_price_wins_over_the_pack_price_and_io_b3os_is_free() -> None:
    manifest = {"pack": "com.example.tools/echo", "pricing": {"model": "per_call", "usd": "0.0001"}}
    assert action_price_microusd(manifest, {"key": "echo"}) == 100
    assert (
        action_price_microusd(manifest, {"key": "x", "pricing": {"model": "per_call", "usd": "0.25"}})
        == 250_000
    )
    assert action_price_microusd(manifest, {"key": "x", "pricing": {"model": "free"}}) == 0
    assert action_price_microusd({**manifest, "pack": "io.b3os/echo"}, {"key": "echo"}) == 0


def test_a_price_above_one_usd_is_refused() -> None:
    with pytest.raises(PriceError, match="more than 1 USD"):
        action_price_microusd({"pack": "a.b/c", "pricing": {"model": "per_call", "usd": "1.000001"}}, {})


def test_an_answered_call_costs_compute_floor_and_price() -> None:
    cost = call_cost(PRICES, ran=True, answered=True, vcpu_ms=1000, gib_ms=500, price=100)
    # 1000 * 0.02 + 500 * 0.0025 = 21.25 micro-USD, rounded up
    assert cost.as_dict() == {"compute": 22, "floor": 10, "price": 100, "total": 132}


def test_a_failed_call_costs_compute_and_floor_never_the_price() -> None:
    cost = call_cost(PRICES, ran=True, answered=False, vcpu_ms=50, gib_ms=0, price=100)
    assert cost.as_dict() == {"compute": 1, "floor": 10, "price": 0, "total": 11}


def test_a_call_that_never_ran_costs_nothing() -> None:
    assert call_cost(PRICES, ran=False, answered=False, vcpu_ms=9, gib_ms=9, price=100).total == 0


def test_a_tool_calls_ceiling_is_its_whole_time_at_its_vms_full_size_and_bounds_what_it_is_charged() -> None:
    most = call_ceiling(PRICES, kind="vm", price=100, timeout_ms=10_000)
    # 11,000 ms (its 10 s and 1 s of slack) at 1 vCPU and 0.5 GiB: 220 + 13.75 micro-USD, rounded up
    assert most.as_dict() == {"compute": 234, "floor": 10, "price": 100, "total": 344}
    assert most.attempts(3) == 3 * 244 + 100  # the price once, by the attempt that succeeds
    used_it_all = call_cost(PRICES, ran=True, answered=True, vcpu_ms=10_050, gib_ms=5_025, price=100)
    assert used_it_all.total <= most.total
    bigger = call_ceiling(PRICES, kind="vm", price=0, timeout_ms=10_000, vcpu=2, memory_mb=1024)
    assert bigger.compute == 440 + 28


def test_an_http_calls_ceiling_is_its_floor_and_price_and_a_js_call_adds_a_floor_per_request() -> None:
    http = call_ceiling(PRICES, kind="http", price=7, timeout_ms=30_000)
    assert http.as_dict() == {"compute": 0, "floor": 10, "price": 7, "total": 17}
    assert http_call_cost(PRICES, sent=True, answered=True, price=7).total == http.total
    js = call_ceiling(PRICES, kind="js", price=0, timeout_ms=10_000)
    assert (js.compute, js.floor) == (234, 10 + 100 * 10)  # its at most 100 requests through the proxy
