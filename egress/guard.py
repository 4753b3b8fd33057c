"""The address guard: an httpcore network backend that only connects to globally routable addresses.

The check runs inside `connect_tcp`, at connect time, on the addresses the name resolves to right
then; the socket is opened to the checked address itself, so a DNS answer that changes between a
check and a connect (rebinding) cannot slip past. httpcore still hands TLS the URL's host name as
`server_hostname`, so the certificate is verified against the real name, not the address.

`connect_to` (an operator seam, `B3OS_EGRESS_CONNECT_TO`) maps a (host, port) to a given
(address, port) and is exempt from the refusal: that is how tests reach loopback servers under real
host names.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

import httpcore

from egress.errors import AddressRefused, EgressError

Resolver = Callable[[str, int], Awaitable[list[str]]]

_CGNAT = ip_network("100.64.0.0/10")
_NAT64 = ip_network("64:ff9b::/96")
_NAT64_LOCAL = ip_network("64:ff9b:1::/48")
_METADATA = ip_address("169.254.169.254")


def _embedded_ipv4(ip: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 IPv6 address stands for."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal(address: str | IPv4Address | IPv6Address) -> str | None:
    """Why `address` may not be reached (a noun phrase), or None when it is globally routable.

    Args:
        address: an IPv4 or IPv6 address (text without brackets, or an `ipaddress` object).
    """
    ip = ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            why = refusal(embedded)
            return None if why is None else f"{why} ({embedded} inside {ip})"
        if ip in _NAT64_LOCAL:
            return "local-use NAT64 address"
    if ip == _METADATA:
        return "link-local address (the cloud metadata service)"
    for label, hit in (
        ("unspecified address", ip.is_unspecified),
        ("loopback address", ip.is_loopback),
        ("link-local address", ip.is_link_local),
        ("multicast address", ip.is_multicast),
        ("shared (CGNAT) address", isinstance(ip, IPv4Address) and ip in _CGNAT),
        ("reserved address", ip.is_reserved),
        ("private address", ip.is_private),
        ("address that is not globally routable", not ip.is_global),
    ):
        if hit:
            return label
    return None


def is_ip_literal(host: str) -> bool:
    """Whether `host` is an IP address rather than a name."""
    try:
        ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (getaddrinfo in the loop's executor, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An `httpcore.AnyIOBackend` that resolves, checks every address, and connects to a checked one."""

    def __init__(
        self,
        *,
        connect_to: Mapping[tuple[str, int], tuple[str, int]] | None = None,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        """Build the backend.

        Args:
            connect_to: {(host, port): (address, port)} overrides, exempt from the address refusal.
            resolver: name resolution (a seam for tests); getaddrinfo by default.
            inner: the backend that opens sockets; `httpcore.AnyIOBackend()` by default.
        """
        self._connect_to = dict(connect_to or {})
        self._resolve = resolver or system_resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def checked_addresses(self, host: str, port: int) -> list[str]:
        """The addresses of `host`, every one of them globally routable.

        Raises:
            AddressRefused: the host is, or resolves to, an address that is not globally routable.
            EgressError: the name does not resolve (reason `connect`).
        """
        host = host.strip("[]").rstrip(".")
        if is_ip_literal(host):
            why = refusal(host)
            if why is not None:
                raise AddressRefused(f"{host} is a {why}: the egress proxy only reaches public addresses")
            return [host]
        try:
            addresses = list(dict.fromkeys(await self._resolve(host, port)))
        except (socket.gaierror, UnicodeError):
            raise EgressError("connect", f"the host name {host} does not resolve") from None
        if not addresses:
            raise EgressError("connect", f"the host name {host} resolves to no address")
        for address in addresses:
            why = refusal(address.split("%")[0])
            if why is not None:
                raise AddressRefused(
                    f"{host} resolves to {address}, a {why}: the egress proxy only reaches public addresses"
                )
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to a checked address of `host` (or to its `connect_to` override)."""
        override = self._connect_to.get((host.strip("[]").rstrip(".").lower(), port))
        if override is not None:
            targets, port = [override[0]], override[1]
        else:
            targets = await self.checked_addresses(host, port)
        last: httpcore.ConnectError | None = None
        for address in targets:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        """Refused: the proxy reaches the network only over TCP."""
        raise AddressRefused("unix sockets are not reachable through the egress proxy")

    async def sleep(self, seconds: float) -> None:
        """Sleep as the inner backend does."""
        await self._inner.sleep(seconds)
