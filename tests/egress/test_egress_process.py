"""`b3os egress run` for real: a subprocess configured by env, its endpoints, and a log free of secrets."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import loopback
import pytest
import trustme
from servers import ProxyProcess, Reply, Upstream, proxy_env, sealed_credential, start_proxy

from egress.sealing import load_or_create_key, public_key_b64

SECRET = "pr0cess-secret-value"
OAUTH_SECRETS = ("0ld-access", "refr3sh-token", "cl1ent-secret", "n3w-access")


@pytest.fixture
def running(
    ca: trustme.CA, ca_file: Path, tmp_path: Path
) -> Iterator[tuple[ProxyProcess, Upstream, Upstream]]:
    api, auth = Upstream(ca, ["api.example.com"]), Upstream(ca, ["auth.example.com"])
    proxy = start_proxy(proxy_env(ca_file, api, auth), tmp_path)
    yield proxy, api, auth
    proxy.stop()
    api.close()
    auth.close()


def test_the_proxy_process_fetches_with_credentials_and_never_logs_a_secret(
    running: tuple[ProxyProcess, Upstream, Upstream], tmp_path: Path
) -> None:
    proxy, api, auth = running
    api.on("/v1/data", Reply(200, [("Content-Type", "application/json")], b'{"n": 1}'))
    api.on("/v1/oauth", lambda r: Reply(200 if r.header("authorization") == "Bearer n3w-access" else 401))
    auth.on("/token", Reply(200, body=b'{"access_token": "n3w-access", "expires_in": 60}'))
    bearer = {"kind": "bearer", "hosts": ["api.example.com"], "inject": None, "secret": SECRET}
    oauth = {
        "kind": "oauth2",
        "hosts": ["api.example.com"],
        "inject": None,
        "secret": {
            "access_token": "0ld-access",
            "refresh_token": "refr3sh-token",
            "token_url": "https://auth.example.com/token",
            "client_id": "c",
            "client_secret": "cl1ent-secret",
        },
    }
    answers = []
    with loopback.client(base_url=proxy.url, headers=proxy.headers, timeout=30) as http:
        for path, payload, conn in (("/v1/data", bearer, "conn_b"), ("/v1/oauth", oauth, "conn_o")):
            request = {
                "method": "POST",
                "url": f"https://api.example.com{path}",
                "headers": [["Content-Type", "text/plain"]],
                "body": base64.b64encode(b"hello").decode(),
                "egress": ["api.example.com"],
                "credentials": [sealed_credential(proxy.public_key, payload, id=conn)],
            }
            answer = http.post("/v1/egress/fetch", json=request)
            assert answer.status_code == 200
            answers.append(answer)
        unauthorized = http.get("/v1/egress/public-key", headers={"Authorization": "Bearer nope"})
        health = http.get("/healthz", headers={"Authorization": ""})

    data, refreshed = (a.json() for a in answers)
    assert data["status"] == 200 and base64.b64decode(data["body"]) == b'{"n": 1}'
    assert refreshed["status"] == 200 and [r["id"] for r in refreshed["refreshed"]] == ["conn_o"]
    assert api.requests[0].header("authorization") == f"Bearer {SECRET}" and api.requests[0].body == b"hello"
    assert unauthorized.status_code == 401 and unauthorized.json()["error"]["code"] == "unauthorized"
    assert health.json() == {"ok": True}
    assert proxy.public_key == public_key_b64(load_or_create_key(tmp_path / "egress.key"))
    assert (tmp_path / "egress.key").stat().st_mode & 0o777 == 0o600

    proxy.stop()
    log = proxy.log_bytes()
    assert f"egress proxy on {proxy.url} (public key {proxy.public_key})".encode() in log
    assert b"POST /v1/egress/fetch" in log  # the access log is on (info), and still carries no secret
    for secret in (SECRET, *OAUTH_SECRETS):
        assert secret.encode() not in log
        assert all(secret not in a.text for a in answers)


def test_the_proxy_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "cli", "egress", "run"], env=env, capture_output=True, text=True, timeout=60
    )

    assert out.returncode == 2
    assert "B3OS_EGRESS_TOKEN is not set" in out.stderr


def test_a_bad_connect_to_entry_is_named(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "B3OS_EGRESS_TOKEN": "t",
        "B3OS_EGRESS_CONNECT_TO": "api.example.com:443:127.0.0.1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "cli", "egress", "run"], env=env, capture_output=True, text=True, timeout=60
    )

    assert out.returncode == 2
    assert "connect_to entry 'api.example.com:443:127.0.0.1' is not host:port:address:port" in out.stderr
