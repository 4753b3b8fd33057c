"""Redirects: followed up to max_redirects, each hop checked again, methods changed as HTTP says."""

from __future__ import annotations

import base64

import pytest
from servers import InProcessProxy, Reply, Upstream

EGRESS = ["api.example.com", "*.example.org"]


def to(location: str, status: int = 302) -> Reply:
    return Reply(status, [("Location", location)])


async def test_a_relative_redirect_is_followed(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/old", to("/new?b=2"))
    api.on("/new", Reply(200, body=b"here"))

    answer = await proxy.fetch(url="https://api.example.com/old", egress=EGRESS)

    assert (answer["status"], answer["redirects"]) == (200, 1)
    assert answer["url"] == "https://api.example.com/new?b=2"
    assert base64.b64decode(answer["body"]) == b"here"


@pytest.mark.parametrize(
    ("status", "method", "body"),
    [
        (303, "GET", None),
        (301, "GET", None),
        (302, "GET", None),
        (307, "POST", b"data"),
        (308, "POST", b"data"),
    ],
)
async def test_a_post_redirected_keeps_or_drops_its_method_and_body(
    proxy: InProcessProxy, api: Upstream, status: int, method: str, body: bytes | None
) -> None:
    api.on("/form", to("/done", status))
    api.on("/done", Reply(200))

    answer = await proxy.fetch(
        method="POST",
        url="https://api.example.com/form",
        headers=[["Content-Type", "text/plain"]],
        body=base64.b64encode(b"data").decode(),
        egress=EGRESS,
    )

    assert answer["status"] == 200
    final = api.requests[1]
    assert final.method == method
    assert final.body == (body or b"")
    assert (final.header("content-type") is not None) == (body is not None)


async def test_a_redirect_to_a_host_outside_egress_is_refused(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/out", to("https://evil.example.net/steal"))

    answer = await proxy.fetch(url="https://api.example.com/out", egress=EGRESS)

    assert answer["error"] == {
        "reason": "egress_refused",
        "message": "evil.example.net (a redirect from api.example.com) is not in the action's egress list",
        "sent": True,
    }


async def test_a_redirect_to_plain_http_is_refused(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/down", to("http://api.example.com/plain"))

    answer = await proxy.fetch(url="https://api.example.com/down", egress=EGRESS)

    assert answer["error"]["reason"] == "egress_refused" and api.hits("/plain") == 0


async def test_a_redirect_to_a_private_address_is_refused(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/in", to("https://127.0.0.1/admin"))

    answer = await proxy.fetch(url="https://api.example.com/in", egress=[*EGRESS, "127.0.0.1"])

    assert answer["error"]["reason"] == "private_address" and answer["error"]["sent"] is True


async def test_five_redirects_are_followed_and_a_sixth_is_refused(
    proxy: InProcessProxy, api: Upstream
) -> None:
    for n in range(6):
        api.on(f"/r{n}", to(f"/r{n + 1}"))
    api.on("/r6", Reply(200))

    five = await proxy.fetch(url="https://api.example.com/r1", egress=EGRESS)
    six = await proxy.fetch(url="https://api.example.com/r0", egress=EGRESS)

    assert (five["status"], five["redirects"]) == (200, 5)
    assert six["error"] == {
        "reason": "redirects",
        "message": "https://api.example.com/r5 redirected more than 5 times",
        "sent": True,
    }


async def test_max_redirects_zero_refuses_the_first(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/r", to("/s"))

    answer = await proxy.fetch(url="https://api.example.com/r", egress=EGRESS, max_redirects=0)

    assert answer["error"]["reason"] == "redirects" and api.hits("/s") == 0


async def test_a_redirect_without_location_is_the_answer(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/r", Reply(302, body=b"nowhere"))

    answer = await proxy.fetch(url="https://api.example.com/r", egress=EGRESS)

    assert answer["status"] == 302 and base64.b64decode(answer["body"]) == b"nowhere"
