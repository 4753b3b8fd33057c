"""Run the embedded stack in the foreground: Temporal, the egress proxy, the api, a node and the routine
worker on 127.0.0.1.

State lives under .b3os/ (SQLite b3os.db, temporal.db, blobs/, node/cache/, build/, egress/egress.key,
logs/<part>.log). Ports: api 8700, node 8710, egress proxy 8720, Temporal 7233, Temporal UI 8233 (flags
below, or B3OS_DEV_API_PORT, B3OS_DEV_NODE_PORT, B3OS_DEV_EGRESS_PORT, B3OS_DEV_TEMPORAL_PORT,
B3OS_DEV_UI_PORT). The node needs root and the base template (`b3os node build-base`). On first start
it creates a dev organization (the operator) and a dev key, gives it the publisher namespaces
com.example.tools and io.b3os with the signing keys com.example.tools#dev and io.b3os#dev (generated
into $B3OS_KEYS_DIR or ~/.b3os/keys), builds and publishes the example tools (examples/tools/*) and the
example declarative packs (examples/packs/*), issues the node its own credential (as `b3os node credential
issue` does), and writes B3OS_API_URL, B3OS_API_KEY, B3OS_DEV_KID, B3OS_NODE_ID, B3OS_NODE_CREDENTIAL,
B3OS_WORKER_TOKEN, B3OS_EGRESS_URL, B3OS_EGRESS_TOKEN and B3OS_TEMPORAL_ADDRESS to .b3os/dev.env (mode
0600). Later starts reuse all of it. Each part is ready before the next starts (the node has installed
the published tools from the registry feed). Once all are up, a part that exits (a crash, SIGKILL, even
Temporal's dev server) is started again after a backoff (0.5 s doubling to 10 s, back to 0.5 s once it ran
30 s; `cli.supervise`), said on stderr as one line, while the others keep running: runs in flight finish
(a step whose node died is retried by Temporal once the node is back). A part that keeps dying is retried
every 10 s for as long as `b3os dev` runs. Ctrl-C or SIGTERM stops every child and their children.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cli._embedded import add_stack_arguments

    add_stack_arguments(parser)


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

    from api import accounts, node_credentials, publishers
    from api.config import Settings
    from api.db import engine_from_settings
    from api.errors import ApiError
    from api.migrations import migrate
    from api.models import Organization, Publisher
    from api.scopes import OWNER_SCOPES
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
                org = accounts.create_organization(session, name="Development", is_operator=True)
            old = accounts.find_key(session, secret=previous.get("B3OS_API_KEY", ""))
            secret = previous["B3OS_API_KEY"] if old is not None and old.revoked_at is None else None
            if secret is None:
                _, secret = accounts.create_api_key(session, org_id=org.id, scopes=OWNER_SCOPES, name="dev")
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


def run(args: argparse.Namespace) -> int:
    from cli._embedded import options_from_args, start_embedded
    from cli.stack import Stack, StackError

    stack = Stack(args.data_dir.resolve() / "logs")
    stack.install_signal_handlers()
    try:
        options = options_from_args(args)
        emb = start_embedded(stack, options, say=lambda line: print(line, flush=True))
    except (CliError, StackError) as exc:
        print(f"b3os dev: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    print(f"api      {emb.api_url}  (OpenAPI docs at {emb.api_url}/docs)")
    print(f"temporal {emb.temporal_address}  (UI {emb.ui_url})")
    print(f"env      {emb.dev_env}  (B3OS_API_URL, B3OS_API_KEY, B3OS_NODE_CREDENTIAL, ...)")
    print(f"logs     {stack.log_dir}")
    for pin in emb.pins:
        print(f"published {pin}")
    print("ready: a part that dies is restarted; Ctrl-C stops everything", flush=True)
    code = stack.wait()
    stack.stop()
    return code
