"""The dev stack's state: the dev organization, key, publishers and signing keys, the node's credential and
the example packs published, kept in `.b3os/dev.env` (`prepare`, `publish_examples`); and whether a stack
that dev.env names is up (`live_stack`). `b3os dev` (cli.dev) and the embedded stack (cli._embedded) use it.

The api's modules are imported inside `prepare` on purpose: the CLI loads them only when it makes the state
(they take a good part of a second), not for every command.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cli._http import ApiConfig, CliError, api, read_env_file

DEV_NAMESPACE = "com.example.tools"
DEV_NAMESPACES = (DEV_NAMESPACE, "io.b3os")
DEV_KID = f"{DEV_NAMESPACE}#dev"


def dev_kid(namespace: str) -> str:
    """The dev signing key id of a namespace: `<namespace>#dev`."""
    return f"{namespace}#dev"


REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DevState:
    """What the dev stack runs with (also written to dev.env)."""

    api_url: str
    api_key: str
    node_id: str
    node_credential: str
    worker_token: str
    temporal_address: str
    egress_url: str = ""
    egress_token: str = ""
    kid: str = DEV_KID

    def env_lines(self) -> str:
        return (
            f"B3OS_API_URL={self.api_url}\nB3OS_API_KEY={self.api_key}\n"
            f"B3OS_DEV_KID={self.kid}\nB3OS_NODE_ID={self.node_id}\nB3OS_NODE_CREDENTIAL={self.node_credential}\n"
            f"B3OS_WORKER_TOKEN={self.worker_token}\nB3OS_TEMPORAL_ADDRESS={self.temporal_address}\n"
            f"B3OS_EGRESS_URL={self.egress_url}\nB3OS_EGRESS_TOKEN={self.egress_token}\n"
        )


def prepare(
    data_dir: Path,
    api_url: str,
    *,
    node_id: str = "node-127.0.0.1-8710",
    temporal_address: str = "127.0.0.1:7233",
    egress_url: str = "",
) -> DevState:
    """Create (or reuse) the dev organization, key, publishers, signing keys and the node's credential;
    write dev.env.

    The worker and egress tokens are generated on first start and kept in dev.env after; the node's
    credential is kept while it stands for `node_id` (else a new one is issued).
    """
    from sqlmodel import Session, select

    from api.accounts import node_credentials, organizations
    from api.accounts.scopes import OWNER_SCOPES
    from api.config import Settings
    from api.db import engine_from_settings
    from api.errors import ApiError
    from api.migrations import migrate
    from api.models import Organization, Publisher
    from api.registry import publishers
    from packs.errors import PackError
    from packs.signing import generate_key, keys_dir, load_public_key_b64

    dev_env_path = data_dir / "dev.env"
    previous = read_env_file(dev_env_path)
    publics: dict[str, str] = {}
    for namespace in DEV_NAMESPACES:
        kid = dev_kid(namespace)
        try:
            publics[namespace] = (
                load_public_key_b64(kid) if (keys_dir() / f"{kid}.key").exists() else generate_key(kid)
            )
        except PackError as exc:
            raise CliError(f"the dev signing key {kid}: {exc}") from exc
    engine = engine_from_settings(Settings(data_dir=data_dir))
    try:
        migrate(engine)
        with Session(engine) as session:
            org = session.exec(select(Organization).where(Organization.is_operator == True)).first()  # noqa: E712
            if org is None:
                org = organizations.create_organization(session, name="Development", is_operator=True)
            old = organizations.find_key(session, secret=previous.get("B3OS_API_KEY", ""))
            secret = previous["B3OS_API_KEY"] if old is not None and old.revoked_at is None else None
            if secret is None:
                _, secret = organizations.create_api_key(
                    session, org_id=org.id, scopes=OWNER_SCOPES, name="dev"
                )
            for namespace, public in publics.items():
                if session.get(Publisher, namespace) is None:
                    publishers.set_publisher(session, namespace=namespace, org_id=org.id)
                try:
                    publishers.register_signing_key(
                        session, namespace=namespace, kid=dev_kid(namespace), public_key=public
                    )
                except ApiError as exc:
                    raise CliError(
                        f"{exc.message} The key directory {keys_dir()} holds another {dev_kid(namespace)}: "
                        f"remove {data_dir} to start afresh."
                    ) from exc
            node_secret = previous.get("B3OS_NODE_CREDENTIAL", "")
            credential = node_credentials.find_credential(session, secret=node_secret)
            if credential is None or credential.revoked_at is not None or credential.node_id != node_id:
                _, node_secret = node_credentials.issue_credential(session, node_id=node_id)
            session.commit()
    finally:
        engine.dispose()
    state = DevState(
        api_url=api_url,
        api_key=secret,
        node_id=node_id,
        node_credential=node_secret,
        worker_token=previous.get("B3OS_WORKER_TOKEN") or secrets.token_urlsafe(32),
        temporal_address=temporal_address,
        egress_url=egress_url,
        egress_token=previous.get("B3OS_EGRESS_TOKEN") or secrets.token_urlsafe(32),
    )
    dev_env_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dev_env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(state.env_lines())
    return state


def publish_examples(state: DevState, examples: list[Path], build_root: Path) -> tuple[list[str], list[str]]:
    """Build each pack under the `examples` directories into `build_root` and publish it.

    Returns:
        The pins of every published action, and the `pack@version` tags of the tool packs (what a node
        installs).

    A version already published with the same content is left as it is; one published with other
    content is reported (versions are immutable: bump the example's version to publish a change).
    """
    from b3os import NotFound
    from cli.pack_publish import publish_dir
    from packs.build import build_pack
    from packs.errors import PackError

    pins: list[str] = []
    tools: list[str] = []
    dirs = sorted(
        p for where in examples if where.is_dir() for p in where.iterdir() if (p / "b3pack.json").is_file()
    )
    with api(ApiConfig(url=state.api_url, key=state.api_key)) as client:
        for pack_dir in dirs:
            namespace = _namespace_of(pack_dir)
            try:
                built = build_pack(pack_dir, kid=dev_kid(namespace), out_dir=build_root / pack_dir.name)
            except PackError as exc:
                raise CliError(f"building {pack_dir}: {exc}") from exc
            pack, version = built.manifest["pack"], built.manifest["version"]
            try:
                listed = client.actions.list_versions(*pack.split("/", 1))
            except NotFound:
                listed = []
            known = {v["version"]: v["content_hash"] for v in listed}
            if known.get(version) not in (None, built.hash):
                print(f"{pack}@{version} is published with other content: bump its version to publish this")
                continue
            if version not in known:
                publish_dir(client, build_root / pack_dir.name, say=lambda _line: None)
            pins.extend(f"{pack}/{a['key']}@{version}" for a in built.manifest["actions"])
            if "tool" in built.manifest:
                tools.append(f"{pack}@{version}")
    return pins, tools


def _namespace_of(pack_dir: Path) -> str:
    import json

    try:
        manifest = json.loads((pack_dir / "b3pack.json").read_text(encoding="utf-8"))
        return str(manifest["pack"]).partition("/")[0]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{pack_dir / 'b3pack.json'} names no pack: {exc}") from exc


def live_stack(dev_env: Path) -> dict[str, str] | None:
    """The settings of dev.env when the stack it names answers (its api's /healthz), else None."""
    import httpx

    values = read_env_file(dev_env)
    url = values.get("B3OS_API_URL")
    if not url or not values.get("B3OS_API_KEY"):
        return None
    try:
        return values if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200 else None
    except httpx.HTTPError:
        return None
