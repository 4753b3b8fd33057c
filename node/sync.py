"""Registry sync: heartbeat to the api, read the registry feed, fetch, verify and install tool archives.

Per docs/internals.md: `POST /v1/nodes/heartbeat` registers the node and reports its free slots and installed
versions; `GET /v1/nodes/registry?after=<cursor>` lists published versions oldest first;
`GET /v1/actions/registry/blobs/sha256:<hex>` returns an archive's bytes. All with this node's credential
(`Authorization: Bearer <B3OS_NODE_CREDENTIAL>`), which the api issued for this node id alone.

A tool version is installed only when every check passes, in this order: the feed's pack and version are the
manifest's; the signature verifies over the recomputed content hash (`packs.signing.verify_manifest`, which
also checks the archive record against `tool.bundle.archive`) and that hash is the registry's record; the
fetched archive has the recorded sha256 and size; it unpacks within its declared `unpackedBytes` and
`entries`. Any failure leaves the version uninstalled and logged with its reason, and calls to it answer
`pack_unavailable` with that reason. A js pack (js actions, no tool) installs its js/** bundle files,
each fetched and checked against its signed record; other declarative packs are not the node's business.
A failure to reach the api stops the round; the cursor only moves past versions that were decided.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from node.cache import CacheError, InstallCache
from packs.archive import MAX_ENTRIES, MAX_UNPACKED_BYTES
from packs.checks_js import is_js_action
from packs.checks_util import actions_of
from packs.errors import PackError
from packs.hashing import ARCHIVE_PATHS, BundleFile
from packs.manifest import parse_manifest
from packs.signing import verify_manifest

log = logging.getLogger("b3os.node.sync")
CURSOR_FILE = ".registry-cursor"


class RegistrySync:
    """Keeps the install cache in step with the registry and tells the api this node is alive."""

    def __init__(
        self,
        *,
        api_url: str,
        credential: str,
        cache: InstallCache,
        node_id: str,
        node_url: str,
        slots_total: int,
        slots_free: Callable[[], int],
        isolation: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.cache = cache
        self.isolation = isolation  # "sandbox" or "microvm/<accel>", said in every heartbeat
        self.node_id, self.node_url = node_id, node_url
        self.slots_total, self._slots_free = slots_total, slots_free
        self._client = client or httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {credential}"}, timeout=30.0
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def cursor(self) -> int:
        """The registry cursor: the last feed entry this node decided (kept across restarts)."""
        path = self.cache.root / CURSOR_FILE
        try:
            return int(path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _save_cursor(self, cursor: int) -> None:
        path: Path = self.cache.root / CURSOR_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(cursor))
        tmp.replace(path)

    def heartbeat(self) -> None:
        """Register or refresh this node at the api.

        Raises:
            httpx.HTTPError: the api could not be reached or refused the heartbeat.
        """
        body = {
            "node_id": self.node_id,
            "url": self.node_url,
            "slots_total": self.slots_total,
            "slots_free": self._slots_free(),
            "installed": self.cache.installed(),
        }
        if self.isolation:
            body["isolation"] = self.isolation
        self._client.post("/v1/nodes/heartbeat", json=body).raise_for_status()

    def sync_once(self) -> list[str]:
        """Read the feed after the cursor to its end; return the versions installed in this round.

        Raises:
            httpx.HTTPError: the api could not be reached; what was decided so far is kept.
        """
        installed: list[str] = []
        while True:
            resp = self._client.get("/v1/nodes/registry", params={"after": self.cursor})
            resp.raise_for_status()
            feed = resp.json()
            versions = feed.get("versions") or []
            for entry in versions:
                if self.install(entry):
                    installed.append(f"{entry.get('pack')}@{entry.get('version')}")
                self._save_cursor(int(entry["seq"]))
            if not versions:
                return installed

    def install(self, entry: Mapping[str, Any]) -> bool:
        """Verify and install one feed entry; False when it is not a tool or failed a check (logged).

        Raises:
            httpx.HTTPError: the archive could not be fetched (the entry stays undecided).
        """
        manifest = entry.get("manifest")
        pack, version = str(entry.get("pack")), str(entry.get("version"))
        if not isinstance(manifest, Mapping) or not (
            isinstance(manifest.get("tool"), Mapping) or any(is_js_action(a) for _, a in actions_of(manifest))
        ):
            return False
        if self.cache.tool_dir(pack, version) is not None:
            return False
        try:
            self._verify_and_install(pack, version, manifest, entry)
        except (PackError, CacheError, KeyError, TypeError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            self.cache.mark_failed(pack, version, reason)
            log.warning("%s@%s is not installed: %s", pack, version, reason)
            return False
        log.info("installed %s@%s", pack, version)
        return True

    def _verify_and_install(
        self, pack: str, version: str, manifest: Mapping[str, Any], entry: Mapping[str, Any]
    ) -> None:
        if manifest.get("pack") != pack or manifest.get("version") != version:
            raise ValueError(
                f"the feed names {pack}@{version} but its manifest is {manifest.get('pack')}@"
                f"{manifest.get('version')}"
            )
        files = [BundleFile.from_dict(f) for f in entry.get("files") or []]
        hash_ = verify_manifest(manifest, files, str(entry.get("public_key") or ""))
        recorded = entry.get("content_hash")
        if recorded and recorded != hash_:
            raise ValueError(f"content hash {hash_} is not the registry's record {recorded}")
        tool = parse_manifest(manifest).tool  # the typed models every part reads a manifest with
        if tool is None:  # a js pack: its code is the js/** bundle files
            code = self._js_files(files)
            for _, action in actions_of(manifest):
                path = action["impl"].get("entry") if is_js_action(action) else None
                if path is not None and path not in code:
                    raise ValueError(f"{pack}@{version}: the entry {path} is not a file of its bundle")
            self.cache.install_files(pack, version, code, dict(manifest))
            return
        archive = tool.bundle.archive
        fmt = archive.format
        record = next(f for f in files if f.path == ARCHIVE_PATHS.get(fmt, "tool.tar"))
        resp = self._client.get(f"/v1/actions/registry/blobs/sha256:{record.sha256}")
        resp.raise_for_status()
        data = resp.content
        if len(data) != record.bytes or hashlib.sha256(data).hexdigest() != record.sha256:
            raise ValueError(
                f"the fetched archive ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}) is not "
                f"the signed one ({record.bytes} bytes, sha256 {record.sha256})"
            )
        self.cache.install_archive(
            pack,
            version,
            data,
            fmt=fmt,
            max_unpacked_bytes=min(archive.unpacked_bytes, MAX_UNPACKED_BYTES),
            max_entries=min(archive.entries, MAX_ENTRIES),
            manifest=dict(manifest),
        )

    def _js_files(self, files: list[BundleFile]) -> dict[str, bytes]:
        """Fetch a js pack's code (its js/** bundle files), each checked against its signed record."""
        out: dict[str, bytes] = {}
        for record in files:
            if not record.path.startswith("js/"):
                continue
            resp = self._client.get(f"/v1/actions/registry/blobs/sha256:{record.sha256}")
            resp.raise_for_status()
            data = resp.content
            if len(data) != record.bytes or hashlib.sha256(data).hexdigest() != record.sha256:
                raise ValueError(f"the fetched {record.path} is not the signed one ({record.bytes} bytes)")
            out[record.path] = data
        return out

    def start(self, interval_s: float) -> None:
        """Heartbeat and sync every `interval_s` seconds in a background thread until `stop`."""
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), name="b3os-sync", daemon=True)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.heartbeat()
                if self.sync_once():
                    self.heartbeat()
            except httpx.HTTPError as exc:
                log.warning("registry sync with the api failed: %s", exc)
            self._stop.wait(interval_s)

    def stop(self) -> None:
        """Stop the background loop, tell the api this node is leaving, and close the HTTP client.

        When the loop ran, a last heartbeat reports no free slot and nothing installed, so that the api
        stops placing calls here at once instead of until this node's heartbeat ages out.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            leaving = {"node_id": self.node_id, "url": self.node_url, "slots_total": self.slots_total,
                       "slots_free": 0, "installed": []}  # fmt: skip
            try:
                self._client.post("/v1/nodes/heartbeat", json=leaving, timeout=2.0).raise_for_status()
            except httpx.HTTPError as exc:
                log.warning("could not tell the api this node is leaving: %s", exc)
        self._client.close()
