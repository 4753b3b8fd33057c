"""Helpers of the api tests (fixtures are in conftest.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from packs.build import build_pack
from packs.hashing import BundleFile
from packs.loader import load_built_bundle
from packs.signing import public_key_b64

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Org:
    """An organization of a test and one key of it."""

    org_id: str
    key_id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


NAMESPACE = "com.example.tools"
KID = f"{NAMESPACE}#test"
ECHO = REPO / "examples" / "tools" / "echo"


@dataclass
class Built:
    """A built (signed) copy of a pack and what a publish sends."""

    root: Path
    manifest: dict[str, Any]
    files: dict[str, bytes]

    @property
    def records(self) -> list[dict[str, Any]]:
        return [BundleFile.of(p, d).to_dict() for p, d in sorted(self.files.items())]


def build_echo(
    where: Path,
    key: Ed25519PrivateKey,
    *,
    version: str = "1.0.0",
    kid: str = KID,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Built:
    """Copy the echo tool to `where`, set its version (and apply `edit`), build and sign it."""
    root = where / f"echo-{version}-{uuid.uuid4().hex[:6]}"
    shutil.copytree(ECHO, root)
    manifest = json.loads((root / "b3pack.json").read_text())
    manifest["version"] = version
    if edit is not None:
        edit(manifest)
        actions = {a["key"] for a in manifest.get("actions", [])}
        for fixture in (root / "fixtures").glob("*.json"):  # an action taken out takes its fixtures along
            if json.loads(fixture.read_text()).get("action") not in actions:
                fixture.unlink()
    (root / "b3pack.json").write_text(json.dumps(manifest))
    build_pack(root, kid=kid, private_key=key, tool=True)
    manifest, files = load_built_bundle(root)
    return Built(root=root, manifest=manifest, files=files)


def upload(client: httpx.Client, org: Org, files: dict[str, bytes]) -> None:
    """Upload every file as a blob."""
    for data in files.values():
        name = "sha256:" + hashlib.sha256(data).hexdigest()
        r = client.put(f"/v1/actions/registry/blobs/{name}", headers=org.headers, content=data)
        assert r.status_code in (200, 201), r.text


def register_key(client: httpx.Client, org: Org, key: Ed25519PrivateKey, kid: str = KID) -> None:
    """Register the public key of `key` under `kid`."""
    r = client.post(
        f"/v1/actions/publishers/{NAMESPACE}/keys",
        headers=org.headers,
        json={"kid": kid, "public_key": public_key_b64(key)},
    )
    assert r.status_code in (200, 201), r.text
