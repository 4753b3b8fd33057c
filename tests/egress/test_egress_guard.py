"""The address guard: what counts as private, and that it holds at connect time for names and literals."""

from __future__ import annotations

from pathlib import Path

import pytest
from servers import InProcessProxy, Reply, Upstream, in_process_proxy, proxy_env

from egress.errors import AddressRefused
from egress.guard import GuardedBackend, refusal

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "metadata"),
    ("169.254.1.1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.1", "private"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "private"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
    ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
    ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
    ("64:ff9b:1::1", "NAT64"),
    ("::a00:1", "reserved"),  # IPv4-compatible, deprecated
]
ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_addresses_that_are_not_globally_routable_are_refused(address: str, kind: str) -> None:
    why = refusal(address)
    assert why is not None and kind in why


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://127.0.0.1/", "127.0.0.1"),
        ("https://10.0.0.1/x", "10.0.0.1"),
        ("https://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("https://[::1]/", "::1"),
        ("https://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1"),
    ],
)
async def test_a_literal_private_address_in_the_url_is_refused(
    proxy: InProcessProxy, url: str, host: str
) -> None:
    answer = await proxy.fetch(url=url, egress=[host])

    assert answer["error"]["reason"] == "private_address" and answer["error"]["sent"] is False
    assert answer["error"]["message"].startswith(f"{host} is a ")


async def test_a_name_that_resolves_to_loopback_is_refused(proxy: InProcessProxy) -> None:
    answer = await proxy.fetch(url="https://localhost/", egress=["localhost"])

    assert answer["error"]["reason"] == "private_address"
    assert answer["error"]["message"].startswith("localhost resolves to ")
    assert "loopback address" in answer["error"]["message"]


@pytest.mark.parametrize("addresses", [["10.0.0.7"], ["93.184.215.14", "169.254.169.254"], ["fd00::7"]])
async def test_a_name_with_any_private_address_is_refused(
    ca_file: Path, tmp_path: Path, addresses: list[str]
) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return addresses  # the one fake: DNS answers of the internet

    async with in_process_proxy(proxy_env(ca_file), tmp_path / "k", resolver=resolver) as proxy:
        answer = await proxy.fetch(url="https://internal.example.com/", egress=["internal.example.com"])

    assert answer["error"]["reason"] == "private_address"
    assert answer["error"]["message"].startswith("internal.example.com resolves to ")


async def test_the_guard_checks_at_connect_time_and_connect_to_is_exempt(api: Upstream) -> None:
    guard = GuardedBackend(connect_to={("api.example.com", 443): ("127.0.0.1", api.port)})

    with pytest.raises(AddressRefused):
        await guard.connect_tcp("localhost", api.port)
    with pytest.raises(AddressRefused):
        await guard.connect_tcp("127.0.0.1", api.port)
    stream = await guard.connect_tcp("api.example.com", 443)
    assert stream.get_extra_info("server_addr")[:2] == ("127.0.0.1", api.port)
    await stream.aclose()


async def test_connect_to_reaches_loopback_under_the_real_name(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/", Reply(200))

    answer = await proxy.fetch(url="https://api.example.com/", egress=["api.example.com"])

    assert answer["status"] == 200
