"""The proxy's HTTP surface and settings: auth, request validation, the public key, connect_to parsing."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import ValidationError
from servers import InProcessProxy

from egress.config import EgressSettings, parse_connect_to


async def test_healthz_needs_no_token(proxy: InProcessProxy) -> None:
    answer = await proxy.client.get("/healthz")

    assert (answer.status_code, answer.json()) == (200, {"ok": True})


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "test-egress-token", "Basic dGVzdA=="])
async def test_a_wrong_or_missing_token_is_401(proxy: InProcessProxy, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}

    fetch = await proxy.client.post("/v1/egress/fetch", json={}, headers=headers)
    key = await proxy.client.get("/v1/egress/public-key", headers=headers)

    for answer in (fetch, key):
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"


async def test_the_public_key_is_32_raw_bytes_in_base64(proxy: InProcessProxy) -> None:
    answer = await proxy.client.get(
        "/v1/egress/public-key", headers={"Authorization": f"Bearer {proxy.token}"}
    )

    assert answer.status_code == 200
    assert len(base64.b64decode(answer.json()["public_key"])) == 32
    assert answer.json()["public_key"] == proxy.public_key


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not json", "the request body is not JSON"),
        (b"[1]", "the request body is not a JSON object"),
        (b'{"method": "GET", "url": "https://api.example.com/"}', "egress: Field required"),
        (b'{"method": "GET", "url": "https://a.example/", "egress": [], "body": "%%"}', "body: Value error"),
        (b'{"method": "TRACE", "url": "https://a.example/", "egress": []}', "method: "),
        (
            b'{"method": "GET", "url": "https://a.example/", "egress": [], "headers": [["X\\nY", "1"]]}',
            "headers.0.0",
        ),
        (
            b'{"method": "GET", "url": "https://a.example/", "egress": [], "headers": [["X", "a\\r\\nB"]]}',
            "headers",
        ),
    ],
)
async def test_a_malformed_request_is_400_naming_the_field(
    proxy: InProcessProxy, content: bytes, says: str
) -> None:
    answer = await proxy.client.post(
        "/v1/egress/fetch", content=content, headers={"Authorization": f"Bearer {proxy.token}"}
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"
    assert says in answer.json()["error"]["message"]


def test_connect_to_entries_parse_with_brackets_for_ipv6() -> None:
    parsed = parse_connect_to("API.example.com:443:127.0.0.1:8443, other.example.org:443:[::1]:9443,")

    assert parsed == {
        ("api.example.com", 443): ("127.0.0.1", 8443),
        ("other.example.org", 443): ("::1", 9443),
    }


@pytest.mark.parametrize("entry", ["api.example.com:443", "a:443:::1:80", "a:443:b:99999", "a:x:b:1"])
def test_a_bad_connect_to_entry_is_a_sentence_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="connect_to entry"):
        parse_connect_to(f"ok.example.com:443:127.0.0.1:1,{entry}")


def test_settings_need_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("B3OS_EGRESS_TOKEN", raising=False)

    with pytest.raises(ValidationError):
        EgressSettings()  # type: ignore[call-arg]


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("B3OS_EGRESS_TOKEN", "s3cr3t-t0ken")
    monkeypatch.setenv("B3OS_EGRESS_KEY_FILE", str(tmp_path / "k.pem"))
    monkeypatch.setenv("B3OS_EGRESS_CONNECT_TO", "api.example.com:443:127.0.0.1:1")

    settings = EgressSettings()  # type: ignore[call-arg]

    assert settings.token.get_secret_value() == "s3cr3t-t0ken" and "s3cr3t" not in repr(settings)
    assert settings.connect_map() == {("api.example.com", 443): ("127.0.0.1", 1)}
    assert (settings.host, settings.port) == ("127.0.0.1", 8720)
