"""Fixtures of the egress tests: a trustme CA, HTTPS upstreams on loopback under real host names
(api.example.com, other.example.org, auth.example.com), and the proxy app in-process reaching them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme
from servers import InProcessProxy, Upstream, in_process_proxy, make_ca, proxy_env, write_ca


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return make_ca()


@pytest.fixture(scope="session")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ca(ca, tmp_path_factory.mktemp("egress-ca") / "ca.pem")


def _upstream(ca: trustme.CA, name: str) -> Iterator[Upstream]:
    server = Upstream(ca, [name])
    yield server
    server.close()


@pytest.fixture
def api(ca: trustme.CA) -> Iterator[Upstream]:
    yield from _upstream(ca, "api.example.com")


@pytest.fixture
def other(ca: trustme.CA) -> Iterator[Upstream]:
    yield from _upstream(ca, "other.example.org")


@pytest.fixture
def auth(ca: trustme.CA) -> Iterator[Upstream]:
    yield from _upstream(ca, "auth.example.com")


@pytest.fixture
async def proxy(
    api: Upstream, other: Upstream, auth: Upstream, ca_file: Path, tmp_path: Path
) -> AsyncIterator[InProcessProxy]:
    async with in_process_proxy(proxy_env(ca_file, api, other, auth), tmp_path / "egress.key") as running:
        yield running
