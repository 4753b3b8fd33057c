"""`/docs` (Swagger UI) and `/redoc` (ReDoc) render in a real headless Chromium with no internet.

The browser resolves no host name but the api's loopback address, so a page that needed a CDN would
stay blank. Each page must render every operation of `/openapi.json`, and Chromium's network log must
show that every request the page made went to the api itself (its assets come from the
`fastapi-offline` package, served under `/docs/assets/`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loopback
import pytest
from liveapi import LiveApi, start_live_api

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    api = start_live_api(tmp_path_factory.mktemp("docs"))
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module")
def document(live: LiveApi) -> dict[str, Any]:
    body: dict[str, Any] = loopback.get(f"{live.url}/openapi.json").json()
    return body


@dataclass
class Rendered:
    """What the browser made of a page: its DOM after the scripts ran, and the URLs the page fetched."""

    dom: str
    fetched: list[str]


def render(url: str, origin: str, where: Path) -> Rendered:
    """Load `url` in headless Chromium, with no host but 127.0.0.1 resolvable, and dump its DOM."""
    profile, netlog = where / "profile", where / "netlog.json"
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--log-net-log={netlog}", "--virtual-time-budget=20000", "--dump-dom", url,
    ]  # fmt: skip
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert ran.returncode == 0, ran.stderr[-3000:]
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    fetched = [
        event["params"]["url"]
        for event in log["events"]
        if event["type"] == start_job and event.get("params", {}).get("initiator") == origin
    ]
    return Rendered(dom=ran.stdout, fetched=fetched)


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def test_swagger_ui_renders_every_operation_and_the_authorize_button(
    live: LiveApi, document: dict[str, Any], tmp_path: Path
) -> None:
    page = render(f"{live.url}/docs", live.url, tmp_path)
    for path, _, _ in operations(document):
        assert f'data-path="{path}"' in page.dom, path
    assert page.dom.count('class="opblock-summary-path"') == len(operations(document))
    assert "btn authorize" in page.dom  # the bearer scheme: Authorize takes an API key
    assert sorted(page.fetched) == sorted(
        f"{live.url}{p}"
        for p in (
            "/docs/assets/swagger-ui.css",
            "/docs/assets/swagger-ui-bundle.js",
            "/docs/assets/favicon.png",
            "/openapi.json",
        )
    )


def test_redoc_renders_every_operation(live: LiveApi, document: dict[str, Any], tmp_path: Path) -> None:
    page = render(f"{live.url}/redoc", live.url, tmp_path)
    for path, method, operation in operations(document):
        assert f'data-section-id="operation/{operation["operationId"]}"' in page.dom, (method, path)
    assert "/v1/actions/call" in page.dom
    assert page.fetched and all(url.startswith(f"{live.url}/") for url in page.fetched), page.fetched
    assert f"{live.url}/docs/assets/redoc.standalone.js" in page.fetched
    assert f"{live.url}/openapi.json" in page.fetched


def test_the_docs_assets_come_from_the_api(live: LiveApi) -> None:
    for name, media_type in [
        ("swagger-ui-bundle.js", "text/javascript"),
        ("swagger-ui.css", "text/css"),
        ("redoc.standalone.js", "text/javascript"),
        ("favicon.png", "image/png"),
    ]:
        r = loopback.get(f"{live.url}/docs/assets/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media_type), name
        assert len(r.content) > 1000, name
    for page in ("/docs", "/redoc"):
        r = loopback.get(f"{live.url}{page}")
        assert "http://" not in r.text and "https://" not in r.text, r.text
        assert r.headers["content-security-policy"].startswith("default-src 'self';")
