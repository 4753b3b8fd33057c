"""Registry sync against a small real HTTP server that speaks the api's node seam (docs/internals.md)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI, Request, Response
from nodetest import ECHO_TOOL, REPO, echo_call

from node.cache import InstallCache
from node.runner import Runner
from node.sync import RegistrySync
from node.vm.bwrap import BwrapDriver
from packs.archive import build_archive
from packs.hashing import BundleFile
from packs.signing import public_key_b64, sign_manifest

TOKEN = "sync-node-token"
KID = "com.example.tools#dev-test"


class StandInApi:
    """The api's node endpoints over a list of feed entries and a blob store, recording what it was asked."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.blobs: dict[str, bytes] = {}
        self.heartbeats: list[dict[str, Any]] = []
        self.blob_gets = 0
        self.blob_status = 200
        self.app = FastAPI()

        def authorized(request: Request) -> bool:
            return request.headers.get("authorization") == f"Bearer {TOKEN}"

        @self.app.post("/v1/nodes/heartbeat")
        async def heartbeat(request: Request) -> Response:
            if not authorized(request):
                return Response(status_code=401)
            self.heartbeats.append(await request.json())
            return Response("{}", media_type="application/json")

        @self.app.get("/v1/nodes/registry")
        async def registry(request: Request, after: int = 0) -> Response:
            if not authorized(request):
                return Response(status_code=401)
            page = [e for e in self.entries if e["seq"] > after][:1]
            body = {"versions": page, "cursor": page[-1]["seq"] if page else after}
            return Response(json.dumps(body), media_type="application/json")

        @self.app.get("/v1/actions/registry/blobs/{digest}")
        async def blob(request: Request, digest: str) -> Response:
            if not authorized(request):
                return Response(status_code=401)
            self.blob_gets += 1
            data = self.blobs.get(digest.removeprefix("sha256:"))
            if self.blob_status != 200 or data is None:
                return Response(status_code=self.blob_status if data is not None else 404)
            return Response(data, media_type="application/octet-stream")

    def publish(
        self,
        version: str,
        *,
        key: Ed25519PrivateKey,
        served_key: Ed25519PrivateKey | None = None,
        tamper: str = "",
    ) -> None:
        """Add a signed echo version to the feed, broken the way `tamper` says."""
        data, stats = build_archive(ECHO_TOOL)
        manifest = json.loads((REPO / "examples/tools/echo/b3pack.json").read_text())
        manifest["version"] = version
        manifest["tool"]["bundle"]["archive"] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "format": "tar",
            "unpackedBytes": stats.unpacked_bytes,
            "entries": 1 if tamper == "entries" else stats.entries,
        }
        notices = (REPO / "examples/tools/echo/NOTICES.md").read_bytes()
        files = [BundleFile.of("tool.tar", data), BundleFile.of("NOTICES.md", notices)]
        signed = sign_manifest(manifest, files, key, KID)
        content_hash = signed["signature"]["hash"]
        if tamper == "manifest":
            signed = copy.deepcopy(signed)
            signed["title"] = "Echo, changed after signing"
        if tamper == "hash_record":
            content_hash = "sha256:" + "0" * 64
        self.blobs[hashlib.sha256(data).hexdigest()] = data + b"x" if tamper == "blob" else data
        self.entries.append(
            {
                "seq": len(self.entries) + 1,
                "pack": "com.example.tools/echo",
                "version": version,
                "content_hash": content_hash,
                "manifest": signed,
                "files": [f.to_dict() for f in files],
                "public_key": public_key_b64(served_key or key),
            }
        )


@pytest.fixture
def api() -> Iterator[tuple[StandInApi, str]]:
    stand_in = StandInApi()
    server = uvicorn.Server(uvicorn.Config(stand_in.app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield stand_in, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def sync_cache() -> Iterator[InstallCache]:
    root = Path(tempfile.mkdtemp(prefix="b3os-sync-cache-", dir="/tmp"))
    os.chmod(root, 0o755)
    yield InstallCache(root)
    shutil.rmtree(root, ignore_errors=True)


def _sync(url: str, cache: InstallCache) -> RegistrySync:
    return RegistrySync(
        api_url=url,
        credential=TOKEN,
        cache=cache,
        node_id="node-test",
        node_url="http://127.0.0.1:9",
        slots_total=8,
        slots_free=lambda: 8,
        isolation="microvm/tcg",
    )


def test_a_signed_version_is_installed_reported_and_callable(
    api: tuple[StandInApi, str], sync_cache: InstallCache, driver: BwrapDriver
) -> None:
    stand_in, url = api
    stand_in.publish("1.2.0", key=Ed25519PrivateKey.generate())
    sync = _sync(url, sync_cache)
    assert sync.sync_once() == ["com.example.tools/echo@1.2.0"]
    sync.heartbeat()
    assert stand_in.heartbeats[-1] == {
        "node_id": "node-test",
        "url": "http://127.0.0.1:9",
        "slots_total": 8,
        "slots_free": 8,
        "installed": ["com.example.tools/echo@1.2.0"],
        "isolation": "microvm/tcg",
    }
    result = Runner(driver, sync_cache).call(echo_call("noop", {}).model_copy(update={"version": "1.2.0"}))
    assert result.ok, result.error
    # the cursor is kept: a second round asks for nothing again
    gets = stand_in.blob_gets
    assert sync.sync_once() == [] and stand_in.blob_gets == gets and sync.cursor == 1
    sync.stop()


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        ("key", "signature.value does not verify with the public key"),
        ("manifest", "does not match signature.hash"),
        ("hash_record", "is not the registry's record sha256:0000"),
        ("blob", "the fetched archive"),
        ("entries", "did not unpack"),
    ],
)
def test_a_version_failing_a_check_is_not_installed_and_calls_say_why(
    api: tuple[StandInApi, str],
    sync_cache: InstallCache,
    driver: BwrapDriver,
    tamper: str,
    why: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stand_in, url = api
    key = Ed25519PrivateKey.generate()
    served = Ed25519PrivateKey.generate() if tamper == "key" else key
    stand_in.publish("1.3.0", key=key, served_key=served, tamper=tamper)
    sync = _sync(url, sync_cache)
    with caplog.at_level("WARNING", logger="b3os.node.sync"):
        assert sync.sync_once() == []
    assert sync_cache.installed() == [] and sync.cursor == 1
    assert any(why in r.getMessage() and "1.3.0 is not installed" in r.getMessage() for r in caplog.records)
    result = Runner(driver, sync_cache).call(echo_call("noop", {}).model_copy(update={"version": "1.3.0"}))
    assert result.error is not None and result.error.code == "pack_unavailable"
    assert result.error.message.startswith("com.example.tools/echo@1.3.0 is not installed on this node: ")
    assert why in result.error.message
    assert list(sync_cache.root.glob("*/*/.1.3.0-*")) == [], "no half-installed directory is left"
    sync.stop()


def test_an_unreachable_blob_keeps_the_version_for_the_next_round(
    api: tuple[StandInApi, str], sync_cache: InstallCache
) -> None:
    stand_in, url = api
    stand_in.publish("1.4.0", key=Ed25519PrivateKey.generate())
    stand_in.blob_status = 503
    sync = _sync(url, sync_cache)
    with pytest.raises(httpx.HTTPStatusError):
        sync.sync_once()
    assert sync.cursor == 0 and sync_cache.installed() == []
    stand_in.blob_status = 200
    assert sync.sync_once() == ["com.example.tools/echo@1.4.0"]
    sync.stop()


def test_a_declarative_version_is_left_alone_and_the_feed_goes_on(
    api: tuple[StandInApi, str], sync_cache: InstallCache, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in, url = api
    key = Ed25519PrivateKey.generate()
    manifest = json.loads((REPO / "examples/packs/github/b3pack.json").read_text())
    manifest["actions"] = manifest["actions"][:2]  # its http actions: a js action's code is installed
    signed = sign_manifest(manifest, [], key, "io.b3os#dev-test")
    stand_in.entries.append(
        {
            "seq": 1,
            "pack": "io.b3os/github",
            "version": "1.0.0",
            "content_hash": signed["signature"]["hash"],
            "manifest": signed,
            "files": [],
            "public_key": public_key_b64(key),
        }
    )
    stand_in.publish("1.5.0", key=key)  # a tool version right after it
    sync = _sync(url, sync_cache)
    with caplog.at_level("INFO", logger="b3os.node.sync"):
        assert sync.sync_once() == ["com.example.tools/echo@1.5.0"]
    assert sync.cursor == 2 and stand_in.blob_gets == 1, "nothing fetched for the declarative pack"
    assert not any("io.b3os/github" in r.getMessage() for r in caplog.records), "neither installed nor failed"
    assert sync_cache.installed() == ["com.example.tools/echo@1.5.0"]
    assert list(sync_cache.root.glob("io.b3os*")) == []
    sync.stop()


def test_a_js_packs_code_is_fetched_checked_and_installed(
    api: tuple[StandInApi, str], sync_cache: InstallCache, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in, url = api
    key = Ed25519PrivateKey.generate()
    manifest = json.loads((REPO / "examples/packs/github/b3pack.json").read_text())
    code = {f"js/{p.name}": p.read_bytes() for p in (REPO / "examples/packs/github/js").glob("*.js")}
    files = [BundleFile.of(path, data) for path, data in sorted(code.items())]
    signed = sign_manifest(manifest, files, key, "io.b3os#dev-test")
    for data in code.values():
        stand_in.blobs[hashlib.sha256(data).hexdigest()] = data
    entry = {
        "pack": "io.b3os/github",
        "version": "1.0.0",
        "content_hash": signed["signature"]["hash"],
        "manifest": signed,
        "files": [f.to_dict() for f in files],
        "public_key": public_key_b64(key),
    }
    lacking = sign_manifest({**manifest, "version": "1.0.1"}, files[1:], key, "io.b3os#dev-test")
    stand_in.entries += [
        {**entry, "seq": 1},
        {
            **entry,
            "seq": 2,
            "version": "1.0.1",
            "manifest": lacking,
            "content_hash": lacking["signature"]["hash"],
            "files": [f.to_dict() for f in files[1:]],
        },
    ]
    sync = _sync(url, sync_cache)
    with caplog.at_level("WARNING", logger="b3os.node.sync"):
        assert sync.sync_once() == ["io.b3os/github@1.0.0"]
    tree = sync_cache.tool_dir("io.b3os/github", "1.0.0")
    assert tree is not None and (tree / "js" / "issues.js").read_bytes() == code["js/issues.js"]
    assert sync_cache.tool_dir("io.b3os/github", "1.0.1") is None
    assert sync_cache.failure("io.b3os/github", "1.0.1") == (
        "io.b3os/github@1.0.1: the entry js/issues.js is not a file of its bundle"
    )
    sync.stop()
