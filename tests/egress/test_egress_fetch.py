"""One exchange through the in-process proxy to real HTTPS upstreams: answers, limits, refusals."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import trustme
from servers import InProcessProxy, Reply, Upstream, in_process_proxy, proxy_env

EGRESS = ["api.example.com", "*.example.org"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_get_answers_status_headers_body_and_final_url(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/v1/x", Reply(200, [("Content-Type", "application/json")], b'{"ok": 1}'))

    answer = await proxy.fetch(
        url="https://api.example.com/v1/x?a=1", headers=[["Accept", "application/json"]], egress=EGRESS
    )

    assert answer["status"] == 200
    assert base64.b64decode(answer["body"]) == b'{"ok": 1}'
    assert ["content-type", "application/json"] in answer["headers"]
    assert answer["url"] == "https://api.example.com/v1/x?a=1"
    assert (answer["redirects"], answer["sent"], answer["refreshed"]) == (0, True, [])
    assert set(answer["timings"]) == {"total_ms", "upstream_ms"}
    [seen] = api.requests
    assert (seen.method, seen.target) == ("GET", "/v1/x?a=1")
    assert seen.header("accept") == "application/json"
    assert seen.header("host") == "api.example.com"


async def test_post_sends_its_body(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/items", Reply(201, body=b"made"))

    answer = await proxy.fetch(
        method="POST",
        url="https://api.example.com/items",
        headers=[["Content-Type", "application/json"]],
        body=b64(b'{"name": "x"}'),
        egress=EGRESS,
    )

    assert answer["status"] == 201 and base64.b64decode(answer["body"]) == b"made"
    [seen] = api.requests
    assert seen.method == "POST" and seen.body == b'{"name": "x"}'
    assert seen.header("content-type") == "application/json"
    assert seen.header("content-length") == "13"


async def test_host_length_and_hop_by_hop_headers_are_not_forwarded_as_given(
    proxy: InProcessProxy, api: Upstream
) -> None:
    api.on("/h", Reply(200))

    await proxy.fetch(
        method="POST",
        url="https://api.example.com/h",
        headers=[
            ["Host", "evil.example.net"],
            ["Content-Length", "999"],
            ["Connection", "close, X-Drop"],
            ["X-Drop", "1"],
            ["Proxy-Authorization", "Basic eA=="],
            ["X-Keep", "kept"],
        ],
        body=b64(b"abc"),
        egress=EGRESS,
    )

    [seen] = api.requests
    assert seen.header("host") == "api.example.com"
    assert seen.header("content-length") == "3"
    assert seen.header("x-drop") is None and seen.header("proxy-authorization") is None
    assert seen.header("x-keep") == "kept"


async def test_gzip_response_is_decoded(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/z", Reply(200, [("Content-Encoding", "gzip")], gzip.compress(b"hello " * 100)))

    answer = await proxy.fetch(url="https://api.example.com/z", egress=EGRESS)

    assert base64.b64decode(answer["body"]) == b"hello " * 100
    names = [name for name, _ in answer["headers"]]
    assert "content-encoding" not in names and "content-length" not in names
    assert api.requests[0].header("accept-encoding") == "gzip, deflate"


async def test_body_over_the_limit_is_cut_off(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/big", Reply(200, body=b"x" * (2 * 1024 * 1024)))

    answer = await proxy.fetch(url="https://api.example.com/big", egress=EGRESS, max_body_bytes=1000)

    assert answer["error"] == {
        "reason": "body_too_large",
        "message": "the response of https://api.example.com/big is larger than 1000 bytes",
        "sent": True,
    }


async def test_default_limit_is_one_mebibyte(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/ok", Reply(200, body=b"x" * (1024 * 1024)))
    api.on("/big", Reply(200, body=b"x" * (1024 * 1024 + 1)))

    assert (await proxy.fetch(url="https://api.example.com/ok", egress=EGRESS))["status"] == 200
    answer = await proxy.fetch(url="https://api.example.com/big", egress=EGRESS)
    assert answer["error"]["reason"] == "body_too_large"


async def test_a_gzip_bomb_is_cut_off_after_decoding(proxy: InProcessProxy, api: Upstream) -> None:
    bomb = gzip.compress(b"\0" * (20 * 1024 * 1024))
    api.on("/bomb", Reply(200, [("Content-Encoding", "gzip")], bomb))

    answer = await proxy.fetch(url="https://api.example.com/bomb", egress=EGRESS, max_body_bytes=4096)

    assert len(bomb) < 100_000 and answer["error"]["reason"] == "body_too_large"


async def test_a_slow_upstream_times_out(proxy: InProcessProxy, api: Upstream) -> None:
    api.on("/slow", Reply(200, hold=True))

    answer = await proxy.fetch(url="https://api.example.com/slow", egress=EGRESS, timeout_ms=300)

    assert answer["error"] == {
        "reason": "timeout",
        "message": "the exchange with api.example.com took longer than 300 ms",
        "sent": True,
    }


async def test_plain_http_is_refused_before_any_connection(proxy: InProcessProxy, api: Upstream) -> None:
    answer = await proxy.fetch(url="http://api.example.com/v1/x", egress=EGRESS)

    assert answer["error"] == {
        "reason": "egress_refused",
        "message": "http://api.example.com is refused: the proxy only fetches https URLs",
        "sent": False,
    }
    assert api.requests == []


async def test_a_host_outside_the_egress_list_is_refused(proxy: InProcessProxy, api: Upstream) -> None:
    answer = await proxy.fetch(url="https://api.example.com/v1/x", egress=["*.example.org"])

    assert answer["error"]["reason"] == "egress_refused"
    assert answer["error"]["message"] == "api.example.com is not in the action's egress list"
    assert api.requests == []


async def test_a_url_with_user_info_is_refused_without_echoing_it(proxy: InProcessProxy) -> None:
    answer = await proxy.fetch(url="https://me:hunter2@api.example.com/x?q=1", egress=EGRESS)

    assert answer["error"]["reason"] == "bad_request"
    assert "hunter2" not in json.dumps(answer)
    assert "https://api.example.com/x" in answer["error"]["message"]


async def test_a_certificate_for_another_name_fails_tls(
    ca: trustme.CA, ca_file: Path, tmp_path: Path
) -> None:
    impostor = Upstream(ca, ["api.example.com"], cert_names=["wrong.example.net"])
    try:
        async with in_process_proxy(proxy_env(ca_file, impostor), tmp_path / "k") as proxy:
            answer = await proxy.fetch(url="https://api.example.com/", egress=EGRESS)
    finally:
        impostor.close()

    assert answer["error"]["reason"] == "tls" and answer["error"]["sent"] is False
    assert answer["error"]["message"].startswith("the TLS handshake with api.example.com failed")
    assert impostor.requests == []


async def test_an_untrusted_certificate_fails_tls(ca_file: Path, tmp_path: Path) -> None:
    stranger = Upstream(trustme.CA(), ["api.example.com"])
    try:
        async with in_process_proxy(proxy_env(ca_file, stranger), tmp_path / "k") as proxy:
            answer = await proxy.fetch(url="https://api.example.com/", egress=EGRESS)
    finally:
        stranger.close()

    assert answer["error"]["reason"] == "tls"
    assert "certificate verify failed" in answer["error"]["message"]


async def test_a_closed_port_is_a_connect_error(ca_file: Path, tmp_path: Path) -> None:
    from servers import free_port

    env = proxy_env(ca_file, extra_connect_to=[f"api.example.com:443:127.0.0.1:{free_port()}"])
    async with in_process_proxy(env, tmp_path / "k") as proxy:
        answer = await proxy.fetch(url="https://api.example.com/", egress=EGRESS)

    assert answer["error"] == {
        "reason": "connect",
        "message": "could not connect to api.example.com:443",
        "sent": False,
    }
