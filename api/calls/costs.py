"""What a call costs, in integer micro-USD: compute, the per-call floor and the publisher's price.

Prices are decimal strings parsed exactly, never through a float: a manifest's `"0.0001"` is 100
micro-USD. Unit prices of compute come from configuration as USD per unit with up to 12 decimal
places (pico-USD precision); the compute charge of one call is rounded up to a whole micro-USD.

    compute = ceil((vcpu_ms * price_vcpu_ms + gib_ms * price_gib_ms) in micro-USD)
    floor   = the per-call price of `actions.tool_call`, when the command ran
    price   = the publisher's price, only once the tool answered with a valid output
    total   = compute + floor + price
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

MICROUSD_PER_USD = 10**6
PICOUSD_PER_MICROUSD = 10**6
MAX_PRICE_MICROUSD = MICROUSD_PER_USD  # a per-call price is at most 1 USD
FREE_NAMESPACES = ("io.b3os",)

_DECIMAL = re.compile(r"^(\d+)(?:\.(\d+))?$")


class PriceError(ValueError):
    """A price string is not a decimal number of USD this version takes."""


def parse_usd(text: Any, *, places: int = 6, what: str = "price") -> int:
    """Parse a decimal USD string into an integer number of 10^-places USD.

    Args:
        text: a string such as `"0.0001"`; no sign, no exponent.
        places: decimal places of the result unit (6 = micro-USD, 12 = pico-USD).
        what: the name used in the error sentence.

    Raises:
        PriceError: the string is not a plain decimal or has more than `places` decimal places.
    """
    if not isinstance(text, str) or not _DECIMAL.match(text):
        raise PriceError(f'{what} {text!r} is not a decimal number of USD such as "0.0001"')
    match = _DECIMAL.match(text)
    assert match is not None
    whole, frac = match.group(1), match.group(2) or ""
    if len(frac) > places:
        raise PriceError(f"{what} {text!r} has more than {places} decimal places")
    return int(whole) * 10**places + int(frac.ljust(places, "0") or "0")


def action_price_microusd(manifest: dict[str, Any], action: dict[str, Any]) -> int:
    """The publisher's price of one call of an action, in micro-USD (0 when free).

    The action's `pricing` wins over the pack's; a pack in `io.b3os` has no price.
    """
    namespace = str(manifest.get("pack", "")).split("/", 1)[0]
    if namespace in FREE_NAMESPACES:
        return 0
    pricing = action.get("pricing") or manifest.get("pricing") or {"model": "free"}
    if pricing.get("model") != "per_call":
        return 0
    price = parse_usd(pricing.get("usd"), what="pricing.usd")
    if price > MAX_PRICE_MICROUSD:
        raise PriceError(f"pricing.usd {pricing.get('usd')!r} is more than 1 USD")
    return price


@dataclass(frozen=True)
class UnitPrices:
    """Unit prices of the metered compute units, in pico-USD, and the per-call floor in micro-USD."""

    vcpu_ms_picousd: int
    gib_ms_picousd: int
    tool_call_microusd: int
    action_call_microusd: int = 10

    @classmethod
    def parse(
        cls, *, vcpu_ms_usd: str, gib_ms_usd: str, tool_call_usd: str, action_call_usd: str = "0.00001"
    ) -> UnitPrices:
        """Build the unit prices from configuration strings in USD per unit."""
        return cls(
            vcpu_ms_picousd=parse_usd(vcpu_ms_usd, places=12, what="the price of actions.vcpu_ms"),
            gib_ms_picousd=parse_usd(gib_ms_usd, places=12, what="the price of actions.gib_ms"),
            tool_call_microusd=parse_usd(tool_call_usd, what="the price of actions.tool_call"),
            action_call_microusd=parse_usd(action_call_usd, what="the price of actions.call"),
        )


@dataclass(frozen=True)
class Cost:
    """The cost of one call in micro-USD, as the action result shows it."""

    compute: int = 0
    floor: int = 0
    price: int = 0

    @property
    def total(self) -> int:
        """compute + floor + price."""
        return self.compute + self.floor + self.price

    def as_dict(self) -> dict[str, int]:
        """`{"compute", "floor", "price", "total"}`."""
        return {**asdict(self), "total": self.total}


def compute_microusd(prices: UnitPrices, *, vcpu_ms: int, gib_ms: int) -> int:
    """The compute charge of measured usage, rounded up to a whole micro-USD."""
    pico = vcpu_ms * prices.vcpu_ms_picousd + gib_ms * prices.gib_ms_picousd
    return -(-pico // PICOUSD_PER_MICROUSD)


def call_cost(
    prices: UnitPrices, *, ran: bool, answered: bool, vcpu_ms: int, gib_ms: int, price: int
) -> Cost:
    """The cost of one call.

    Args:
        prices: the unit prices.
        ran: the tool's command started (compute and the floor are charged only then).
        answered: the tool answered, its output matched its schema and its files were read
            (the publisher's price is charged only then).
        vcpu_ms: CPU the call's VM used, as the node measured it.
        gib_ms: memory, GiB times milliseconds.
        price: the publisher's price in micro-USD.
    """
    if not ran:
        return Cost()
    return Cost(
        compute=compute_microusd(prices, vcpu_ms=vcpu_ms, gib_ms=gib_ms),
        floor=prices.tool_call_microusd,
        price=price if answered else 0,
    )


def http_call_cost(prices: UnitPrices, *, sent: bool, answered: bool, price: int) -> Cost:
    """The cost of one HTTP action call: the `actions.call` floor once its request was sent, and the
    publisher's price when it succeeded (its output matched its schema). Nothing before it was sent."""
    if not sent:
        return Cost()
    return Cost(floor=prices.action_call_microusd, price=price if answered else 0)


VM_VCPU = 1
VM_MEMORY_MB = 512
"""A VM's size when its manifest names none (the seed's: 1 vCPU and 512 MiB, swap included)."""
COMPUTE_SLACK_MS = 1_000
"""What a call's metered time may pass its timeout by (the node's poll of the command and its kill), so that
the most a call's compute can cost is a bound, not an estimate."""
JS_REQUESTS_MAX = 100
"""The most requests a js call makes through the egress proxy (node.js.relay.MAX_REQUESTS), each charged an
HTTP action's floor."""


@dataclass(frozen=True)
class CallCeiling:
    """The most one attempt of a call can cost, in micro-USD: its compute for its whole time at its VM's
    full size, its floor (a js call's requests included), and the publisher's price (charged once, by the
    attempt that succeeds; a failed attempt is charged compute and the floor, never the price)."""

    compute: int = 0
    floor: int = 0
    price: int = 0

    def attempts(self, count: int) -> int:
        """The most `count` attempts of one call (one foreach item) can cost: each its compute and floor,
        and the price once."""
        return count * (self.compute + self.floor) + (self.price if count > 0 else 0)

    @property
    def total(self) -> int:
        """One attempt that succeeds: compute + floor + price."""
        return self.attempts(1)

    def as_dict(self) -> dict[str, int]:
        """`{"compute", "floor", "price", "total"}`, as a call's `cost` reads."""
        return {**asdict(self), "total": self.total}


def call_ceiling(
    prices: UnitPrices,
    *,
    kind: str,
    price: int,
    timeout_ms: int,
    vcpu: int = VM_VCPU,
    memory_mb: int = VM_MEMORY_MB,
) -> CallCeiling:
    """The most one attempt of a call can cost (see `CallCeiling`).

    Args:
        prices: the unit prices.
        kind: the action's `impl.kind`: `vm` and `js` run on a node (compute and the tool call's floor; js
            adds an HTTP action's floor for each of its requests), `http` is charged its floor alone.
        price: the publisher's price in micro-USD.
        timeout_ms: the call's time (the least of the step's, the action's own and the api's most).
        vcpu: the VM's vCPUs. memory_mb: its memory.
    """
    if kind == "http":
        return CallCeiling(floor=prices.action_call_microusd, price=price)
    ms = timeout_ms + COMPUTE_SLACK_MS
    compute = compute_microusd(prices, vcpu_ms=ms * vcpu, gib_ms=-(-ms * memory_mb // 1024))
    floor = prices.tool_call_microusd
    if kind == "js":
        floor += JS_REQUESTS_MAX * prices.action_call_microusd
    return CallCeiling(compute=compute, floor=floor, price=price)
